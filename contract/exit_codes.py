"""The exit codes of every command, as Jepsen's (anomalies.md "Verdict"), defined once."""

EXIT_VALID = 0
EXIT_ANOMALIES = 1  # also a gate or a nightly cell whose found classes differ from `expect`
EXIT_UNKNOWN = 2  # the run was incomplete or could not be judged
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT (128 + 2)
EXIT_BAD_INPUT = 254  # the arguments (or a file they name) are wrong; nothing ran
EXIT_CRASH = 255  # a bug in the tool: a traceback and this code, never for bad input

# A command that judges nothing (`spark up`, `spark down`) reads the same codes plainly.
EXIT_OK = EXIT_VALID  # it did what it was asked
EXIT_FAILED = EXIT_ANOMALIES  # it could not (the cluster did not start), and said why
