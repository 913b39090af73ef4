//! recorder
