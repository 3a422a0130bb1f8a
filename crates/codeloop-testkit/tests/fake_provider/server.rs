//! Server behaviour.
