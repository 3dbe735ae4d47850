#!/usr/bin/env python3
"""torch_peer.py — foxnet v1's train step in PyTorch, as fast as PyTorch goes.

The peer foxbench is measured against: the same network at the default widths
(gpu/model.h, gpu/cpu/net.c: GRN trunk 64 -> 256 -> 128, a value head and four
branch heads with per-branch dueling over 51 C51 atoms, the IQN head on 8
fractions with a 64-wide cosine embedding, the next-bar and regime aux heads),
the same losses (C51 cross-entropy against the double-DQN target projected onto
the support, IQN quantile Huber, aux MSE and CE), global-norm clipping, Adam,
a post-Adam weight clamp and a soft target update. FP32, TF32 off, as foxhunt.

Forms (--form): eager; graph (one CUDA graph of the whole step, fused Adam,
the clamp and target update as foreach ops); compile (torch.compile
max-autotune of the step's math inside the same whole-step graph). Prints the
median µs a step over --reps chunks of --chunk steps for each batch:

    python3 bench/torch_peer.py --form graph --batch 256 --batch 4096
    python3 bench/torch_peer.py --form compile --sweep   # 256 ... 16,384
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

S, H1, H2, HH, NA, NT, NC, HA, NR = 64, 256, 128, 128, 51, 8, 64, 64, 4
BRANCHES = (3, 4, 2, 3)  # direction, size, order type, urgency
V_MIN, V_MAX, GAMMA_N, KAPPA, CLIP, WCLAMP, TAU_SOFT = -10.0, 10.0, 0.99**3, 1.0, 10.0, 10.0, 0.005


class GRN(nn.Module):
    """ELU(W2 a) -> W1 -> GLU(sigmoid(Wg .) * Wv .) + skip -> LayerNorm, as cpu/net.c."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.w2, self.w1 = nn.Linear(n_in, n_out), nn.Linear(n_out, n_out)
        self.wg, self.wv = nn.Linear(n_out, n_out), nn.Linear(n_out, n_out)
        self.wr = nn.Linear(n_in, n_out, bias=False) if n_in != n_out else None
        self.ln = nn.LayerNorm(n_out, eps=1e-5)

    def forward(self, a):
        eta1 = self.w1(F.elu(self.w2(a)))
        glu = torch.sigmoid(self.wg(eta1)) * self.wv(eta1)
        return self.ln((self.wr(a) if self.wr is not None else a) + glu)


def mlp2(n_in, hid, n_out):
    return nn.Sequential(nn.Linear(n_in, hid), nn.ReLU(), nn.Linear(hid, n_out))


class FoxNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.g1, self.g2 = GRN(S, H1), GRN(H1, H2)
        self.val = mlp2(H2, HH, NA)
        self.br = nn.ModuleList(mlp2(H2, HH, n * NA) for n in BRANCHES)
        self.phi, self.iqn_q = nn.Linear(NC, H2), nn.Linear(H2, sum(BRANCHES))
        self.aux_ret, self.aux_reg = mlp2(H2, HA, 1), mlp2(H2, HA, NR)
        self.register_buffer("k", torch.arange(NC, dtype=torch.float32) * math.pi)

    def trunk(self, s):
        return self.g2(self.g1(s))

    def c51(self, h):
        """Per-branch dueling log-probabilities, [B, n_d, NA] each."""
        v = self.val(h).unsqueeze(1)
        out = []
        for head, n in zip(self.br, BRANCHES):
            a = head(h).view(-1, n, NA)
            out.append(F.log_softmax(v + a - a.mean(1, keepdim=True), dim=-1))
        return out

    def iqn(self, h, tau):
        """Quantiles [B, NT, n_actions] at fractions tau [B, NT]."""
        phi = F.relu(self.phi(torch.cos(tau.unsqueeze(-1) * self.k)))
        return self.iqn_q(h.unsqueeze(1) * phi)


def project(p, r, g, z):
    """C51 projection of pmf p [B, NA] with reward r and discount g onto support z."""
    dz = (V_MAX - V_MIN) / (NA - 1)
    tz = (r.unsqueeze(1) + g.unsqueeze(1) * z).clamp(V_MIN, V_MAX)
    b = ((tz - V_MIN) / dz).clamp(0, NA - 1)
    lo, hi = b.floor().long(), b.ceil().long()
    m = torch.zeros_like(p)
    m.scatter_add_(1, lo, p * (hi.float() - b + (lo == hi).float()))
    m.scatter_add_(1, hi, p * (b - lo.float()))
    return m


def losses(net, tgt, z, bt):
    s, s2, a, r, done, ret, reg, tau, tau2 = bt
    h, h2 = net.trunk(s), net.trunk(s2)
    lp, lp_next = net.c51(h), net.c51(h2)
    with torch.no_grad():
        ht = tgt.trunk(s2)
        lp_t = tgt.c51(ht)
        g = GAMMA_N * (1.0 - done)
    c51, off, a_star = 0.0, 0, []
    for d, n in enumerate(BRANCHES):
        with torch.no_grad():
            q_next = (lp_next[d].exp() * z).sum(-1)
            best = q_next.argmax(1)
            a_star.append(best + off)
            p_t = lp_t[d].exp().gather(1, best.view(-1, 1, 1).expand(-1, 1, NA)).squeeze(1)
            m = project(p_t, r, g, z)
        cur = lp[d].gather(1, a[:, d].view(-1, 1, 1).expand(-1, 1, NA)).squeeze(1)
        c51 = c51 + (-(m * cur).sum(-1)).mean()
        off += n
    c51 = c51 / len(BRANCHES)
    q = net.iqn(h, tau)
    with torch.no_grad():
        q_t = tgt.iqn(ht, tau2)
    iqn, off = 0.0, 0
    for d, n in enumerate(BRANCHES):
        qa = q.gather(2, (a[:, d] + off).view(-1, 1, 1).expand(-1, NT, 1)).squeeze(2)
        with torch.no_grad():
            qt = q_t.gather(2, a_star[d].view(-1, 1, 1).expand(-1, NT, 1)).squeeze(2)
            target = r.unsqueeze(1) + g.unsqueeze(1) * qt
        u = target.unsqueeze(1) - qa.unsqueeze(2)
        hub = torch.where(u.abs() <= KAPPA, 0.5 * u * u, KAPPA * (u.abs() - 0.5 * KAPPA))
        rho = (tau.unsqueeze(2) - (u.detach() < 0).float()).abs() * hub / KAPPA
        iqn = iqn + rho.sum(1).mean(1).mean()
        off += n
    iqn = iqn / len(BRANCHES)
    aux = F.mse_loss(net.aux_ret(h).squeeze(1), ret) + F.cross_entropy(net.aux_reg(h), reg)
    return c51 + iqn + aux


def make_batch(B, dev, gen):
    return (torch.randn(B, S, device=dev, generator=gen), torch.randn(B, S, device=dev, generator=gen),
            torch.stack([torch.randint(0, n, (B,), device=dev, generator=gen) for n in BRANCHES], 1),
            torch.randn(B, device=dev, generator=gen) * 0.1,
            (torch.rand(B, device=dev, generator=gen) < 0.01).float(),
            torch.randn(B, device=dev, generator=gen), torch.randint(0, NR, (B,), device=dev, generator=gen),
            torch.rand(B, NT, device=dev, generator=gen), torch.rand(B, NT, device=dev, generator=gen))


def build_step(form, B, dev):
    torch.manual_seed(1)
    net, tgt = FoxNet().to(dev), FoxNet().to(dev)
    tgt.load_state_dict(net.state_dict())
    z = torch.linspace(V_MIN, V_MAX, NA, device=dev)
    params, tparams = list(net.parameters()), list(tgt.parameters())
    opt = torch.optim.Adam(params, lr=1e-4, fused=form != "eager", capturable=form != "eager")
    static = make_batch(B, dev, torch.Generator(device=dev).manual_seed(2))
    loss_fn = losses
    if form == "compile":
        loss_fn = torch.compile(losses, mode="max-autotune-no-cudagraphs")

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(net, tgt, z, static)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP, foreach=True)
        opt.step()
        with torch.no_grad():
            torch._foreach_clamp_min_(params, -WCLAMP)
            torch._foreach_clamp_max_(params, WCLAMP)
            torch._foreach_lerp_(tparams, params, TAU_SOFT)
        return loss

    if form == "eager":
        return step
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up: compilation, cuBLAS workspaces, Adam state
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def time_step(run, chunk, reps):
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(chunk):
            run()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / chunk * 1e6)
    return statistics.median(times), min(times), max(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--form", choices=("eager", "graph", "compile"), default="graph")
    ap.add_argument("--batch", type=int, action="append")
    ap.add_argument("--sweep", action="store_true", help="batches 256, 512, ..., 16384")
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    batches = [256 << i for i in range(7)] if args.sweep else (args.batch or [256, 4096])
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(dev)}, form {args.form}, FP32")
    print("batch  train step us (median [min-max])")
    for B in batches:
        run = build_step(args.form, B, dev)
        med, lo, hi = time_step(run, args.chunk, args.reps)
        print(f"{B:5d}  {med:9.1f} [{lo:.1f}-{hi:.1f}]", flush=True)


if __name__ == "__main__":
    main()
