//! Weir's source connectors: where the rows of a `CREATE SOURCE` come from.
//!
//! | module | connector |
//! |---|---|
//! | [`datagen`] | `connector = 'datagen'`: synthetic rows, a pure function of the options and the row index |
//! | [`nexmark`] | `connector = 'nexmark'`: the Nexmark benchmark's person, auction and bid streams, a pure function of the event number |
//!
//! A connector knows nothing about sessions, epochs or the object store: it
//! turns validated options into a `weir_stream::runtime::Source`, whose
//! readers yield batches of rows and report their position; the runtime
//! checkpoints the position, and after a crash opens the source there
//! again. Both connectors generate rows from their index alone and share
//! one reader ([`paced`]): splits of index blocks, paced at a rate.

pub mod datagen;
mod generated;
pub mod nexmark;
pub mod paced;
