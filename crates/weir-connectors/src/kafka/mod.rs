//! The Kafka source (`connector = 'kafka'`): a topic's records decoded
//! into rows, each partition a split whose position is its next offset.
//!
//! Offsets live in Weir's checkpoints, not in consumer-group commits: a
//! reader is a consumer with partitions assigned at the offsets its view
//! checkpointed, and after a crash it reads again from exactly there, so
//! every record reaches the view once. It reads with
//! `isolation.level = read_committed`, so records of aborted or open
//! transactions never do.
//!
//! A split's position is its next offset plus one; 0 means the view has
//! not read the partition yet and starts where `scan.startup.mode` says
//! (earliest, latest, or the first record at a timestamp), which the
//! reader pins to an offset as it opens.
//!
//! | module | holds |
//! |---|---|
//! | `options` | the options and the consumer settings |
//! | `reader` | the consumer thread and the reader the runtime polls |

mod metadata;
mod options;
mod reader;

use std::time::Duration;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use rdkafka::consumer::{BaseConsumer, Consumer};
use weir_stream::runtime::{ReadFrom, Source, SourceReader};

use crate::dead_letters::DeadLetterBox;
use crate::records::{Decoder, Rejects};
use metadata::RowShape;

pub use metadata::Include;
pub use options::{KafkaOptions, Startup};

/// How long asking the brokers for a topic's partitions may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// A topic's partitions could not be found.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// No broker answered.
    #[error("could not reach the Kafka brokers at {brokers}: {error}")]
    Unreachable {
        /// The brokers asked.
        brokers: String,
        /// What librdkafka said.
        error: String,
    },
    /// The brokers do not know the topic.
    #[error("Kafka topic \"{0}\" does not exist")]
    NoTopic(String),
}

/// How many partitions `options.topic` has (blocking: it asks a broker).
pub fn partitions(options: &KafkaOptions) -> Result<u32, MetadataError> {
    let unreachable = |error: rdkafka::error::KafkaError| MetadataError::Unreachable {
        brokers: options.brokers.clone(),
        error: error.to_string(),
    };
    let consumer: BaseConsumer = options.consumer_config().create().map_err(unreachable)?;
    let metadata = consumer
        .fetch_metadata(Some(&options.topic), METADATA_TIMEOUT)
        .map_err(unreachable)?;
    match metadata.topics().first() {
        Some(topic) if topic.error().is_none() && !topic.partitions().is_empty() => {
            Ok(topic.partitions().len() as u32)
        }
        _ => Err(MetadataError::NoTopic(options.topic.clone())),
    }
}

/// A Kafka topic as a source of rows.
#[derive(Debug)]
pub struct KafkaSource {
    options: KafkaOptions,
    /// The columns record values decode into (the source's but those of
    /// `INCLUDE`).
    value_schema: SchemaRef,
    shape: RowShape,
    partitions: u32,
    rejects: Rejects,
}

impl KafkaSource {
    /// Source `id`: `options.topic`'s first `partitions` partitions as
    /// rows of `schema`, its dead letters (if kept) in `letters`.
    pub fn new(
        id: u64,
        options: KafkaOptions,
        schema: SchemaRef,
        partitions: u32,
        letters: Option<DeadLetterBox>,
    ) -> Result<Self, String> {
        let (shape, value_schema) = RowShape::new(&schema, &options.include)?;
        let subject = format!("Kafka topic \"{}\" ", options.topic);
        let rejects = Rejects::new(id, subject, options.bad_records, letters)?;
        Ok(KafkaSource {
            options,
            value_schema,
            shape,
            partitions,
            rejects,
        })
    }
}

impl Source for KafkaSource {
    fn splits(&self) -> u32 {
        self.partitions
    }

    fn split_positions(&self, _offset: u64) -> Vec<u64> {
        // Kafka sources always had splits.
        vec![0; self.partitions as usize]
    }

    fn open(&self, from: ReadFrom) -> weir_stream::Result<Box<dyn SourceReader>> {
        let reader = reader::KafkaReader::spawn(
            &self.options,
            Decoder::new(self.options.format.clone(), self.value_schema.clone()),
            self.shape.clone(),
            &from,
            self.rejects.clone(),
        )
        .map_err(|e| DataFusionError::Execution(format!("Kafka source: {e}")))?;
        Ok(Box::new(reader))
    }

    fn reads_bounded(&self) -> bool {
        true
    }

    fn starts_at_head(&self) -> bool {
        matches!(self.options.startup, options::Startup::Latest)
    }
}
