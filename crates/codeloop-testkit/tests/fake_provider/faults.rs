//! Fault injection as a client sees it.
