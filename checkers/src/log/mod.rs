//! The log checker (Kafka semantics). Being written.
