"""The `inspector` command line: `cli.main` dispatches to one module per subcommand (info, run, memory,
serve-sim, space), each with `register(subparsers)` and `run(args) -> int`."""
