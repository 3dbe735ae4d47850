/*
 * help.h — `foxctl help [COMMAND]` (internal to client/): what each command
 * does, its arguments and what it prints, beyond the one-line summary of
 * the usage text.
 */
#ifndef FOX_CLIENT_HELP_H
#define FOX_CLIENT_HELP_H

/*
 * Print the help of command name to stdout (name NULL: the list of
 * commands with a line each). FOXCTL_OK, or FOXCTL_USAGE for an unknown
 * command (with a message on stderr).
 */
int foxctl_help(const char *name);

#endif
