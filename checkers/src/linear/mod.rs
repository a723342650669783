//! The linearizability checker (WGL). Being written.
