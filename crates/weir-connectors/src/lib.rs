//! Weir's source connectors: where the rows of a `CREATE SOURCE` come from.
//!
//! | module | connector |
//! |---|---|
//! | [`datagen`] | `connector = 'datagen'`: synthetic rows, a pure function of the options and the row index |
//! | [`nexmark`] | `connector = 'nexmark'`: the Nexmark benchmark's person, auction and bid streams, a pure function of the event number |
//! | [`kafka`] | `connector = 'kafka'`: a Kafka topic's records, JSON or CSV, each partition a split at its offset |
//! | [`files`] | `connector = 'filesystem'`: CSV, JSON-lines and Parquet files under a folder or prefix, new ones read as they appear |
//!
//! [`records`] turns record values (Kafka values, lines of files) into
//! rows and counts those that do not parse.
//!
//! A connector knows nothing about sessions, epochs or the object store: it
//! turns validated options into a `weir_stream::runtime::Source`, whose
//! readers yield batches of rows and report their position; the runtime
//! checkpoints the position, and after a crash opens the source there
//! again. The generators make rows from their index alone and share one
//! reader ([`paced`]): splits of index blocks, paced at a rate.
//! [`Connector`] is what the server knows of them: their names, their
//! generator versions, the columns a source may leave out, and the
//! runtime `Source` a source's definition makes.

pub mod avro;
pub mod datagen;
pub mod dead_letters;
pub mod duration;
pub mod files;
mod generated;
pub mod kafka;
pub mod nexmark;
pub mod paced;
pub mod records;

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
    /// [`kafka`].
    Kafka,
    /// [`files`].
    Files,
}

/// What a source's definition fixes besides its columns and options.
#[derive(Debug, Clone)]
pub struct SourceSetup {
    /// The source's id.
    pub id: u64,
    /// When it was created (unix microseconds): generators' event time.
    pub created_micros: i64,
    /// The generator version it was created with.
    pub version: u32,
    /// Its splits, for a connector that asks an outside system (a Kafka
    /// topic's partitions when the source was created).
    pub splits: Option<u32>,
    /// Where its dead letters go (`bad_records = 'dead_letter'`); `None`
    /// where the state store is not at hand (such a source is refused).
    pub dead_letters: Option<dead_letters::DeadLetterBox>,
}

impl Connector {
    /// Every connector.
    pub const ALL: [Connector; 4] = [
        Connector::Datagen,
        Connector::Nexmark,
        Connector::Kafka,
        Connector::Files,
    ];

    /// The connector called `name`, if there is one.
    pub fn named(name: &str) -> Option<Connector> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Its name in `WITH (connector = '...')`.
    pub fn name(self) -> &'static str {
        match self {
            Connector::Datagen => "datagen",
            Connector::Nexmark => "nexmark",
            Connector::Kafka => "kafka",
            Connector::Files => "filesystem",
        }
    }

    /// The version of its generator that new sources get (a source keeps
    /// the version it was created with).
    pub fn generator_version(self) -> u32 {
        match self {
            Connector::Datagen => datagen::GENERATOR_VERSION,
            Connector::Nexmark => nexmark::GENERATOR_VERSION,
            Connector::Kafka | Connector::Files => 1,
        }
    }

    /// Whether it generates its rows (they are never NULL, and a read
    /// is a pure function of the options) rather than reading them from
    /// another system.
    pub fn generates(self) -> bool {
        !matches!(self, Connector::Kafka | Connector::Files)
    }

    /// The columns of a source declared without a column list, where the
    /// connector knows them from its options (`None`: a list is needed).
    pub fn default_schema(
        self,
        options: &BTreeMap<String, String>,
    ) -> Option<Result<SchemaRef, ConnectorError>> {
        match self {
            Connector::Datagen | Connector::Kafka | Connector::Files => None,
            Connector::Nexmark => Some(nexmark::table_schema(options).map_err(invalid)),
        }
    }

    /// The columns of records' metadata a source of `options` adds after
    /// its declared ones (a Kafka source's `INCLUDE` columns).
    pub fn included_columns(
        self,
        options: &BTreeMap<String, String>,
    ) -> Result<Vec<datafusion::arrow::datatypes::Field>, ConnectorError> {
        match self {
            Connector::Kafka => Ok(kafka::KafkaOptions::parse(options)
                .map_err(ConnectorError)?
                .include
                .iter()
                .map(|(include, name)| include.field(name))
                .collect()),
            Connector::Datagen | Connector::Nexmark | Connector::Files => Ok(Vec::new()),
        }
    }

    /// A source of `schema` with `options` (keys lowercased, without
    /// `connector`) set up as `setup` says, as the stream runtime reads it.
    pub fn source(
        self,
        schema: SchemaRef,
        options: &BTreeMap<String, String>,
        setup: SourceSetup,
    ) -> Result<Arc<dyn Source>, ConnectorError> {
        let SourceSetup {
            id,
            created_micros,
            version,
            ..
        } = setup;
        Ok(match self {
            Connector::Datagen => Arc::new(datagen::DatagenSource::of_source(
                datagen::DatagenSpec::new(schema, options, created_micros)
                    .and_then(|spec| spec.with_version(version))
                    .map_err(invalid)?,
                id,
                created_micros,
            )),
            Connector::Nexmark => Arc::new(nexmark::NexmarkSource::of_source(
                nexmark::NexmarkSpec::new(schema, options, created_micros)
                    .and_then(|spec| spec.with_version(version))
                    .map_err(invalid)?,
                id,
                created_micros,
            )),
            Connector::Kafka => {
                let options = kafka::KafkaOptions::parse(options).map_err(ConnectorError)?;
                let partitions = setup.splits.ok_or_else(|| {
                    ConnectorError("a Kafka source without its partition count".into())
                })?;
                Arc::new(
                    kafka::KafkaSource::new(
                        setup.id,
                        options,
                        schema,
                        partitions,
                        setup.dead_letters,
                    )
                    .map_err(ConnectorError)?,
                )
            }
            Connector::Files => {
                let options = files::FileOptions::parse(options).map_err(ConnectorError)?;
                Arc::new(
                    files::FileSource::new(setup.id, options, schema, setup.dead_letters)
                        .map_err(ConnectorError)?,
                )
            }
        })
    }
}

fn invalid(error: impl std::fmt::Display) -> ConnectorError {
    ConnectorError(error.to_string())
}
