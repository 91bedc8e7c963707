"""Chat: the engine that turns a question into retrieved sources, a streamed answer and a saved
message, as the event stream of SPEC.md. May import everything below it (store, providers,
retrieval); only the workspace and the CLI import it."""
