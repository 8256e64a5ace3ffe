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
//! [`Connector`] is what the server knows of them: their names, their
//! generator versions, the columns a source may leave out, and the
//! runtime `Source` a source's definition makes.

pub mod datagen;
mod generated;
pub mod nexmark;
pub mod paced;

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use weir_stream::runtime::Source;

/// A source's options do not fit its columns, or are malformed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConnectorError(pub String);

/// A connector `CREATE SOURCE ... WITH (connector = '...')` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connector {
    /// [`datagen`].
    Datagen,
    /// [`nexmark`].
    Nexmark,
}

impl Connector {
    /// Every connector.
    pub const ALL: [Connector; 2] = [Connector::Datagen, Connector::Nexmark];

    /// The connector called `name`, if there is one.
    pub fn named(name: &str) -> Option<Connector> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Its name in `WITH (connector = '...')`.
    pub fn name(self) -> &'static str {
        match self {
            Connector::Datagen => "datagen",
            Connector::Nexmark => "nexmark",
        }
    }

    /// The version of its generator that new sources get (a source keeps
    /// the version it was created with).
    pub fn generator_version(self) -> u32 {
        match self {
            Connector::Datagen => datagen::GENERATOR_VERSION,
            Connector::Nexmark => nexmark::GENERATOR_VERSION,
        }
    }

    /// The columns of a source declared without a column list, where the
    /// connector knows them from its options (`None`: a list is needed).
    pub fn default_schema(
        self,
        options: &BTreeMap<String, String>,
    ) -> Option<Result<SchemaRef, ConnectorError>> {
        match self {
            Connector::Datagen => None,
            Connector::Nexmark => Some(nexmark::table_schema(options).map_err(invalid)),
        }
    }

    /// A source of `schema` with `options` (keys lowercased, without
    /// `connector`), created at `created_micros` with generator `version`,
    /// as the stream runtime reads it.
    pub fn source(
        self,
        schema: SchemaRef,
        options: &BTreeMap<String, String>,
        created_micros: i64,
        version: u32,
    ) -> Result<Arc<dyn Source>, ConnectorError> {
        Ok(match self {
            Connector::Datagen => Arc::new(datagen::DatagenSource::new(
                datagen::DatagenSpec::new(schema, options, created_micros)
                    .and_then(|spec| spec.with_version(version))
                    .map_err(invalid)?,
            )),
            Connector::Nexmark => Arc::new(nexmark::NexmarkSource::new(
                nexmark::NexmarkSpec::new(schema, options, created_micros)
                    .and_then(|spec| spec.with_version(version))
                    .map_err(invalid)?,
            )),
        })
    }
}

fn invalid(error: impl std::fmt::Display) -> ConnectorError {
    ConnectorError(error.to_string())
}
