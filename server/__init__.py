"""The shell around the core: the MCP server and its tools (`app`), HTTP bearer auth (`auth`),
the owner process that shares one store (`owner`, `wire`), sources run in the server
(`sources`), configuration (`settings`), the command line (`cli/`) and the demo (`demo`). The
only code that knows MCP, a client's formats or the environment."""
