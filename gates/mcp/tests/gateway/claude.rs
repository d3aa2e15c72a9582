//! Claude Code through the gateway.
