/* help.c — `foxctl help [COMMAND]` (see help.h). */
#include <stdio.h>
#include <string.h>

#include "client/conn.h"
#include "client/help.h"

static const struct {
    const char *name, *synopsis, *summary, *text;
} topics[] = {
    {"status", "status", "the daemon's state, progress and health",
     "The daemon's state (idle, training, paused, halted, stopping), the fold,\n"
     "epoch and step in progress, the loss and speed, health (the trainer's\n"
     "heartbeat), and the folds finished so far. Answered at once from the\n"
     "last snapshot, never waiting on training."},
    {"run",
     "run [--folds 0,1,2] [--epochs N] [--steps N] [--detach]\n"
     "run --spawn [--folds ...] [--epochs N] [--steps N] [FOXD OPTIONS]",
     "train the walk-forward over folds and print the fold table",
     "Train the walk-forward over the given folds (default: the config's).\n"
     "Waits, with progress on stderr, and prints the per-fold table on\n"
     "stdout; --detach returns once foxd accepted it. --spawn starts a\n"
     "private foxd on ipc sockets in a fresh directory, runs there and stops\n"
     "it afterwards; options after run's own go to that foxd. Ctrl-C stops\n"
     "the wait (and a spawned foxd). Exit 5 when the stability system halted\n"
     "a fold."},
    {"start-fold", "start-fold K [--epochs N] [--steps N] [--detach]", "train one fold",
     "Train fold K alone, as run does for several."},
    {"pause", "pause", "pause training after the current chunk",
     "Pause training after the current chunk of steps."},
    {"resume", "resume", "resume paused training", "Resume paused training."},
    {"stop", "stop", "stop the walk; the engine keeps its state",
     "Stop the walk after the current chunk; the engine keeps its state."},
    {"reset-fold", "reset-fold", "reset the fold's learning state",
     "Reset the fold's learning state (idle, paused or halted only)."},
    {"isv", "isv [SLOT|NAME]... [--member N]", "read slots of the internal state vector",
     "Read slots of the internal state vector, by index or name; all when\n"
     "none are given. isv-list names them. With engine.members > 1 every\n"
     "member's follow member 0's; --member N reads member N's alone."},
    {"isv-list", "isv-list", "the ISV slot table", "The ISV slot table: index, name, width."},
    {"sentinels", "sentinels", "the sentinel slots the stability check watches",
     "The sentinel slots the stability check watches."},
    {"flags", "flags [--clear] [--member N]", "sentinel flags that fired; --clear clears them",
     "Sentinel flags that fired since they were last cleared; --clear clears\n"
     "every member's (a mutating command: needs the token). With\n"
     "engine.members > 1 each member's follow; --member N reads member N's alone."},
    {"checkpoint", "checkpoint save|load [PATH]\ncheckpoint list DIR",
     "save, load or list checkpoints",
     "Save or load a checkpoint inside foxd's state directory (default\n"
     "foxd.ckpt). save waits until the file is written. list reads DIR here\n"
     "(a run directory or foxd's state directory, no daemon needed): each\n"
     "checkpoint's fold, epoch, step, validation Sharpe, size and time."},
    {"config", "config get [KEY]...\nconfig set [--force] KEY=VALUE...",
     "read or change the engine's configuration keys",
     "get lists engine keys and their values (all when none are given).\n"
     "set changes them while foxd is idle and keeps the change in the state\n"
     "directory (foxd.overrides.json): the next start applies it after the\n"
     "config file, so the model still fits the stop checkpoint. Every key but\n"
     "train.epochs, train.steps_per_epoch and train.folds recreates the\n"
     "engine, whose weights start afresh: foxd refuses that while its engine\n"
     "holds training, unless --force."},
    {"metrics", "metrics", "request counters and the most recent epochs",
     "Request counters and the most recent epochs."},
    {"watch", "watch [--count N] [--until EVENT]", "follow the event socket",
     "Follow the event socket and print each event; '! missed N event(s)'\n"
     "marks a gap in the sequence numbers."},
    {"inject-fault", "inject-fault BUFFER nan|inf|huge [--step N] [--member N]",
     "arm a fault for a stability drill (debug.enable only)",
     "Arm a fault for the next fold (needs debug.enable in foxd's config),\n"
     "in every member, or in member N alone with --member N."},
    {"shutdown", "shutdown [--no-checkpoint]", "stop foxd, saving a checkpoint first",
     "Stop foxd, saving a checkpoint first unless --no-checkpoint."},
    {"version", "version", "foxd's version, protocol version and event socket",
     "foxd's version, protocol version and event socket."},
    {"raw", "raw CMD [JSON-ARGS]", "send any protocol command, print the reply as JSON",
     "Send any protocol command and print the reply as JSON."},
    {"sweep",
     "sweep [SPEC.json] [--folds 0,1,2] [--seeds 1,2,3] [--grid KEY=V1,V2]...\n"
     "      [--set KEY=V]... [--epochs N] [--steps N] [--dir DIR]\n"
     "      [--endpoints URL,...] [--attempts N] [--wait S] [--no-pack] | --slurm\n"
     "sweep --gather DIR",
     "run folds x seeds x configurations over daemons",
     "Run folds x seeds x configurations, one fold per job from a fresh\n"
     "engine, over the endpoints (default: --url). Each result is kept in\n"
     "DIR/jobs/ as it arrives; the summary gives per configuration the test\n"
     "Sharpe, mean and SE over seeds, and the baselines. The same spec and\n"
     "--dir again skip finished jobs. Jobs of one fold that differ only in\n"
     "their seed and member keys (train.lr, train.gamma, train.eps_*,\n"
     "policy.band, env.train_cost_mult) train as the members of one engine\n"
     "where their data is the same (a CSV, or data.seed set); --no-pack runs\n"
     "each alone.\n"
     "--slurm writes DIR/tasks.tsv for\n"
     "the Slurm array task " FOX_SBATCH "\n"
     "(scripts/ in the source) instead of running; --gather summarizes."},
    {"backtest",
     "backtest --checkpoint FILE [--data CSV] [--bars [VAL:]FROM:TO] [--out DIR]\n"
     "backtest --daemon --checkpoint FILE [--data CSV] [--bars [VAL:]FROM:TO]",
     "apply a saved policy to bars, against the baselines",
     "Apply a saved policy greedily to bars and print it against the\n"
     "baselines (trend, buy-and-hold, flat, random, oracle), with the\n"
     "verdict. It runs a private foxd --backtest; with --daemon the running\n"
     "foxd does it, and the checkpoint is inside foxd's state directory.\n"
     "The record goes to a run directory (--out)."},
    {"plot", "plot [--follow [--every S]] RUN_DIR", "draw a run directory's pictures again",
     "Draw a run directory's pictures again from its CSV files (foxplot,\n"
     "which needs gnuplot), PNG and SVG beside them; no daemon needed.\n"
     "--follow draws them again each time the running run's metrics.jsonl\n"
     "grows, looking every S seconds (default 2), until the run ends or\n"
     "Ctrl-C."},
    {"compare", "compare [--out DIR] RUN_DIR...", "one picture of several runs",
     "Draw compare.png and compare.svg in DIR (default: here): each run's\n"
     "test Sharpe per epoch and its test equity, its folds joined, one\n"
     "colour and legend entry per run, named by its directory (letters,\n"
     "digits, '.', '_', '+', '-'; a run with another name is left out)."},
    {"help", "help [COMMAND]", "what a command does, its arguments",
     "This text, for one command or all."},
};

int
foxctl_help(const char *name)
{
    size_t n = sizeof topics / sizeof topics[0];
    if (!name) {
        printf("foxctl commands (foxctl help COMMAND for one):\n");
        for (size_t i = 0; i < n; i++)
            printf("  %-14s %s\n", topics[i].name, topics[i].summary);
        return FOXCTL_OK;
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, topics[i].name) == 0) {
            for (const char *s = topics[i].synopsis; *s;) {
                size_t k = strcspn(s, "\n");
                printf("%s foxctl [OPTIONS] %.*s\n", s == topics[i].synopsis ? "usage:" : "      ",
                       (int)k, s);
                s += k + (s[k] == '\n');
            }
            printf("\n%s\n", topics[i].text);
            return FOXCTL_OK;
        }
    fprintf(stderr, "foxctl: no command '%s' (foxctl help lists them)\n", name);
    return FOXCTL_USAGE;
}
