//! Weir's source connectors: where the rows of a `CREATE SOURCE` come from.
//!
//! | module | connector |
//! |---|---|
//! | [`datagen`] | `connector = 'datagen'`: synthetic rows, a pure function of the options and the row index |
//!
//! A connector knows nothing about sessions, epochs or the object store: it
//! turns validated options into batches of rows, and a source resumes after a
//! crash by asking for rows from the offset it had checkpointed.

pub mod datagen;
