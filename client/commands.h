/*
 * commands.h — foxctl's subcommands that take arguments (internal to
 * client/). The options every command sees and one request and its reply
 * are ask.h; run and start-fold, which wait for their op, are run.h.
 *
 * Each foxctl_cmd_* takes the subcommand's argv (argv[0] is its name) and
 * returns foxctl's exit status (conn.h).
 */
#ifndef FOX_CLIENT_COMMANDS_H
#define FOX_CLIENT_COMMANDS_H

#include "client/ask.h"

int foxctl_cmd_isv(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_flags(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_checkpoint(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_config(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_watch(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_inject(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_shutdown(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_raw(foxctl_opts *o, int argc, char **argv);

#endif
