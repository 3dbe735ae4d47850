#!/usr/bin/env python3
"""torch_peer.py — foxnet v1's train step in PyTorch, as fast as PyTorch goes.

The peer foxbench is measured against: the same network at the full widths
(gpu/model.h, gpu/cpu/net.c: GRN trunk 64 -> 256 -> 128, a value head and four
branch heads with per-branch dueling over 51 C51 atoms, the IQN head on 8
fractions with a 64-wide cosine embedding, the next-bar and regime aux heads:
541,160 parameters; --widths default: foxhunt's default widths, 64 wide with
6 actions, 90,736), the same losses (C51 cross-entropy against the double-DQN
target projected onto the support, IQN quantile Huber, aux MSE and CE),
global-norm clipping, Adam, a post-Adam weight clamp and a soft target update.
FP32, TF32 off, as foxhunt.

Forms (--form): eager; graph (one CUDA graph of the whole step, fused Adam,
the clamp and target update as foreach ops); compile (torch.compile
max-autotune of the step's math inside the same whole-step graph). Prints the
median µs a step over --reps chunks of --chunk steps for each batch:

    python3 bench/torch_peer.py --form graph --batch 256 --batch 4096
    python3 bench/torch_peer.py --form compile --sweep   # 256 ... 16,384

--members K: a population of K members (each its own init, target, Adam
state and batch) in one step, the peer of foxbench --set engine.members=K:
the parameters one [K, P] buffer, every member's loss and gradient at once by
torch.func.vmap over grad_and_value of functional_call, the clip by each
member's own norm, Adam, the clamp and the target update over the buffer,
and (--form graph, compile) the K-member step one CUDA graph. Prints the
median µs a K-member step and the member train steps/s in all (K a step).
--members-loop: K separate models instead, each stepped on a stream of its
own, all in one graph (the peer of K engines in one process). --check: no
timing; member k of the vmapped step against a plain step of model k, on the
CPU where there is no GPU:

    python3 bench/torch_peer.py --form graph --members 16 --batch 256
    python3 bench/torch_peer.py --check
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
    # Out of place: vmap has a batch rule for scatter_add, and for scatter_add_ only a loop over members.
    m = torch.zeros_like(p).scatter_add(1, lo, p * (hi.float() - b + (lo == hi).float()))
    return m.scatter_add(1, hi, p * (b - lo.float()))


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


def single_step(net, tgt, z, batch, opt, loss_fn, clip=CLIP):
    """One model's train step as the single forms run it: loss, backward, clip, Adam, clamp, target."""
    params, tparams = list(net.parameters()), list(tgt.parameters())

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(net, tgt, z, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        opt.step()
        with torch.no_grad():
            torch._foreach_clamp_min_(params, -WCLAMP)
            torch._foreach_clamp_max_(params, WCLAMP)
            torch._foreach_lerp_(tparams, params, TAU_SOFT)
        return loss

    return step


def new_model(form, B, dev, gen):
    """A net, its target (a copy), its Adam and its batch; drawn from the global seed and gen."""
    net, tgt = FoxNet().to(dev), FoxNet().to(dev)
    tgt.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=1e-4, fused=form != "eager", capturable=form != "eager")
    return net, tgt, opt, make_batch(B, dev, gen)


def compiled(form, fn):
    return torch.compile(fn, mode="max-autotune-no-cudagraphs") if form == "compile" else fn


def captured(form, step):
    """The eager step as it is, or the whole step captured in one CUDA graph after a warm-up."""
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


def build_step(form, B, dev):
    torch.manual_seed(1)
    net, tgt, opt, static = new_model(form, B, dev, torch.Generator(device=dev).manual_seed(2))
    z = torch.linspace(V_MIN, V_MAX, NA, device=dev)
    return captured(form, single_step(net, tgt, z, static, opt, compiled(form, losses)))


class Pair(nn.Module):
    """A net and its target as one module whose forward is the step's loss, for functional_call."""

    def __init__(self):
        super().__init__()
        self.net, self.tgt = FoxNet(), FoxNet()

    def forward(self, z, batch):
        return losses(self.net, self.tgt, z, batch)


class Members:
    """
    K members in one step: each member's parameters one row of a [K, P] buffer
    (its target's likewise), each member's batch one slice of [K, B, ...]
    inputs. vmap over grad_and_value of functional_call gives every member's
    loss and gradient row at once; the clip scales each row by its own global
    norm, and Adam (one tensor), the clamp and the target update run over the
    whole buffer, so the step's launches do not grow with K.
    """

    def __init__(self, form, B, K, dev, clip=CLIP):
        from torch.func import functional_call, grad_and_value, vmap

        # Member k is drawn as model k of --members-loop (and of check_members): its init and batch.
        gen = torch.Generator(device=dev).manual_seed(2)
        models = [new_model(form, B, dev, gen) for _ in range(K)]
        nets, batches = [m[0] for m in models], [m[3] for m in models]
        named = list(nets[0].named_parameters())
        names, shapes = [n for n, _ in named], [p.shape for _, p in named]
        sizes = [p.numel() for _, p in named]
        with torch.no_grad():
            self.flat = torch.stack([torch.cat([p.reshape(-1) for p in n.parameters()]) for n in nets])
        self.flat.requires_grad_()
        self.tflat = self.flat.detach().clone()
        self.batch = tuple(torch.stack(xs) for xs in zip(*batches))
        self.z = torch.linspace(V_MIN, V_MAX, NA, device=dev)
        self.opt = torch.optim.Adam([self.flat], lr=1e-4, fused=form != "eager", capturable=form != "eager")
        self.clip = clip
        pair = Pair().to(dev)

        def views(row, prefix):
            return {prefix + n: t.view(s) for n, t, s in zip(names, row.split(sizes), shapes)}

        def member_loss(p, tp, batch):
            """One member's loss from its parameter row p [P] and target row tp [P]."""
            return functional_call(pair, {**views(p, "net."), **views(tp, "tgt.")}, (self.z, batch))

        self.grads = compiled(form, vmap(grad_and_value(member_loss)))

    def losses_and_grads(self):
        """Every member's loss [K] and gradient [K, P]."""
        g, loss = self.grads(self.flat.detach(), self.tflat, self.batch)
        return loss, g

    def step(self):
        loss, g = self.losses_and_grads()
        # clip_grad_norm_'s rule, a member's norm over its own row: coef = clip / (norm + 1e-6), at most 1.
        coef = (self.clip / (torch.linalg.vector_norm(g, dim=1) + 1e-6)).clamp(max=1.0)
        self.flat.grad = g.mul_(coef.unsqueeze(1))
        self.opt.step()
        with torch.no_grad():
            self.flat.clamp_(-WCLAMP, WCLAMP)
            self.tflat.lerp_(self.flat, TAU_SOFT)
        return loss


def build_members(form, B, K, dev):
    torch.manual_seed(1)
    return captured(form, Members(form, B, K, dev).step)


def build_members_loop(form, B, K, dev):
    """K separate models, each stepped on a stream of its own, all in one graph (or one eager pass)."""
    torch.manual_seed(1)
    gen = torch.Generator(device=dev).manual_seed(2)
    z = torch.linspace(V_MIN, V_MAX, NA, device=dev)
    loss_fn = compiled(form, losses)
    steps = [single_step(net, tgt, z, batch, opt, loss_fn) for net, tgt, opt, batch in
             (new_model(form, B, dev, gen) for _ in range(K))]
    streams = [torch.cuda.Stream() for _ in range(K)]

    def step():
        main = torch.cuda.current_stream()
        for s, member_step in zip(streams, steps):
            s.wait_stream(main)
            with torch.cuda.stream(s):
                member_step()
        for s in streams:
            main.wait_stream(s)

    return captured(form, step)


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


def check_members(dev, K=3, B=16):
    """
    The vmapped step against K plain ones: member k's loss, gradient and
    clipped gradient, and its parameters and target after one step, must
    equal those of a plain step of model k (the same init and batch). The
    clip is set halfway between the two smallest gradient norms, so that it
    scales every member but one. Tolerances: the clipped gradient 1e-4 of
    its largest element, since a norm over 541,160 float squares differs by
    a few 1e-5 between reduction orders (clip_grad_norm_ reduces each tensor
    first); the parameters a hundredth of lr, since Adam's first move, lr g /
    (|g| + eps), carries the float noise of a gradient element near eps into
    up to lr.
    """
    torch.manual_seed(1)
    m = Members("eager", B, K, dev)
    loss, g = m.losses_and_grads()
    norms = torch.linalg.vector_norm(g, dim=1)
    m.clip = norms.sort().values[:2].mean().item()
    init = m.flat.detach().clone()
    m.step()
    torch.manual_seed(1)
    gen = torch.Generator(device=dev).manual_seed(2)
    models = [new_model("eager", B, dev, gen) for _ in range(K)]
    z = torch.linspace(V_MIN, V_MAX, NA, device=dev)
    flat = lambda ts: torch.cat([t.detach().reshape(-1) for t in ts])
    rel = lambda a, b: (a - b).abs().max().item() / b.abs().max().item()
    ok = True
    for k, (net, tgt, opt, batch) in enumerate(models):
        same_init = torch.equal(init[k], flat(net.parameters()))
        loss_k = losses(net, tgt, z, batch)
        loss_k.backward()
        d_grad = rel(g[k], flat(p.grad for p in net.parameters()))
        single_step(net, tgt, z, batch, opt, losses, m.clip)()
        d_loss = abs(loss[k].item() - loss_k.item()) / abs(loss_k.item())
        d_clip = rel(m.flat.grad[k], flat(p.grad for p in net.parameters()))
        d_param = (m.flat[k].detach() - flat(net.parameters())).abs().max().item()
        d_tgt = (m.tflat[k] - flat(tgt.parameters())).abs().max().item()
        # Adam's first step is ~lr·sign(g) whatever g's scale: a near-zero gradient that the two
        # paths' summation orders give opposite signs moves its weight 2·lr apart (seen on the GPU,
        # whose vmapped products reduce in another order). The clip is checked by d_clip.
        good = same_init and max(d_loss, d_grad) <= 1e-5 and d_clip <= 1e-4 and max(d_param, d_tgt) <= 2e-4
        ok &= good
        print(f"member {k}: loss {loss_k.item():.6f}, grad norm {norms[k].item():.4f} "
              f"({'clipped' if norms[k] > m.clip else 'not clipped'}); vmap against plain: loss "
              f"{d_loss:.1e}, gradient {d_grad:.1e}, clipped gradient {d_clip:.1e} (of the largest), "
              f"parameters {d_param:.1e}, target {d_tgt:.1e} after a step{'' if good else ': FAILED'}")
    print(f"check: {K} members, batch {B}, {dev}, torch {torch.__version__}: {'ok' if ok else 'FAILED'}")
    return ok


def set_widths(name):
    """foxnet's widths: "full" (the 256/128 trunk and 12 actions) or foxhunt's "default" (64 wide, 6 actions)."""
    global H1, H2, HH, BRANCHES
    if name == "default":
        H1, H2, HH, BRANCHES = 64, 64, 64, (3, 1, 1, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--form", choices=("eager", "graph", "compile"), default="graph")
    ap.add_argument("--batch", type=int, action="append")
    ap.add_argument("--sweep", action="store_true", help="batches 256, 512, ..., 16384")
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--members", type=int, default=0,
                    help="K members in one vmapped step; prints µs per K-member step and member train steps/s")
    ap.add_argument("--members-loop", action="store_true",
                    help="with --members K: K separate models, a stream each, stepped in one graph instead")
    ap.add_argument("--widths", choices=("full", "default"), default="full",
                    help="the network's widths: full (541,160 parameters) or foxhunt's default (90,736)")
    ap.add_argument("--check", action="store_true",
                    help="no timing: 3 vmapped members against 3 plain steps (CPU when there is no GPU)")
    args = ap.parse_args()
    set_widths(args.widths)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if args.check:
        raise SystemExit(0 if check_members(torch.device("cuda" if torch.cuda.is_available() else "cpu")) else 1)
    if args.members < 0 or (args.members_loop and args.members < 1):
        ap.error("--members takes K >= 1, and --members-loop needs it")
    batches = [256 << i for i in range(7)] if args.sweep else (args.batch or [256, 4096])
    dev = torch.device("cuda")
    what = ""
    if args.members:
        how = "a model and a stream each, one after another" if args.members_loop else "vmapped in one step"
        what = f", {args.members} members ({how})"
    if args.widths != "full":
        what += f", {args.widths} widths"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(dev)}, form {args.form}, FP32{what}")
    if not args.members:
        print("batch  train step us (median [min-max])")
    else:
        print("batch  K-member step us (median [min-max])  member train steps/s")
    for B in batches:
        if not args.members:
            run = build_step(args.form, B, dev)
        elif args.members_loop:
            run = build_members_loop(args.form, B, args.members, dev)
        else:
            run = build_members(args.form, B, args.members, dev)
        med, lo, hi = time_step(run, args.chunk, args.reps)
        line = f"{B:5d}  {med:9.1f} [{lo:.1f}-{hi:.1f}]"
        print(line if not args.members else f"{line:42s}  {args.members * 1e6 / med:.0f}", flush=True)


if __name__ == "__main__":
    main()
