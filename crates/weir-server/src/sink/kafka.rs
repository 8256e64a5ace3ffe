//! The Kafka sink (`connector = 'kafka'`): each committed epoch's changes
//! as JSON records on a topic.
//!
//! `delivery = 'exactly_once'` (the default) writes an epoch's records
//! and a progress record naming the epoch in one Kafka transaction. The
//! producer's `transactional.id` is the sink's, so a producer started
//! after a crash fences the old one (whose open transaction the broker
//! aborts) and then reads the newest committed progress record to learn
//! which epochs the topic already holds: those are skipped, the rest are
//! written, each once, and consumers that read with
//! `isolation.level = read_committed` see every committed epoch whole and
//! once (as Materialize's progress topic does). `delivery =
//! 'at_least_once'` writes without transactions (idempotent producer);
//! after a crash the epochs not reported delivered are written again.
//!
//! `type = 'upsert'` writes keyed records (the key: the `primary_key`
//! columns as a JSON object), a row's new value for rows added and a
//! tombstone (no value) for keys whose row was removed and not replaced;
//! `type = 'append-only'` writes each added row as often as it was added
//! and takes only queries that only insert.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::json::writer::{LineDelimited, WriterBuilder};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use weir_stream::Changes;

use super::postgres::Failure;
use crate::catalog::ColumnDef;
use crate::error::{SqlState, WeirError, WeirResult};

/// How long one call to the brokers may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The default topic progress records go to.
const PROGRESS_TOPIC: &str = "weir_sink_progress";

/// How long a progress topic that answers as empty is asked again before
/// the sink takes it as empty (see [`KafkaSink::applied_epoch`]).
const EMPTY_PROGRESS_WAIT: Duration = Duration::from_secs(2);

/// A Kafka sink's settings, from `WITH (...)`.
#[derive(Debug, Clone)]
pub(super) struct KafkaSink {
    topic: String,
    brokers: String,
    /// `type = 'upsert'` (else `'append-only'`).
    upsert: bool,
    /// The columns an upsert's records are keyed by.
    primary_key: Vec<String>,
    /// `delivery = 'exactly_once'` (else `'at_least_once'`).
    exactly_once: bool,
    /// Where the transactions' progress records go.
    progress_topic: String,
    /// The producer's transactional id (default `weir-<sink name>`).
    transactional_id: Option<String>,
    /// `properties.<name>` options, passed to librdkafka as `<name>`.
    properties: BTreeMap<String, String>,
}

impl KafkaSink {
    /// Reads the options (RisingWave's and Flink's names).
    pub(super) fn parse(options: &[(String, String)]) -> WeirResult<Self> {
        let mut topic = None;
        let mut brokers = None;
        let mut kind = None;
        let mut primary_key = Vec::new();
        let mut exactly_once = true;
        let mut progress_topic = PROGRESS_TOPIC.to_owned();
        let mut transactional_id = None;
        let mut properties = BTreeMap::new();
        for (key, value) in options {
            match key.as_str() {
                "topic" => topic = Some(value.clone()),
                "properties.bootstrap.server" | "properties.bootstrap.servers" => {
                    brokers = Some(value.clone())
                }
                "type" => kind = Some(value.as_str()),
                "primary_key" => {
                    primary_key = value.split(',').map(|c| c.trim().to_owned()).collect();
                }
                "delivery" | "sink.delivery-guarantee" => {
                    exactly_once = match value.replace('-', "_").as_str() {
                        "exactly_once" => true,
                        "at_least_once" => false,
                        _ => {
                            return Err(invalid(format!(
                                "delivery = '{value}': use 'exactly_once' or 'at_least_once'"
                            )))
                        }
                    }
                }
                "format" | "value.format" | "encode" if value.eq_ignore_ascii_case("json") => {}
                "format" | "value.format" | "encode" => {
                    return Err(WeirError::unsupported(format!(
                        "Kafka sink format '{value}' (Weir writes 'json')"
                    )))
                }
                "progress.topic" => progress_topic = value.clone(),
                "transactional.id" | "properties.transactional.id" => {
                    transactional_id = Some(value.clone())
                }
                _ => match key.strip_prefix("properties.") {
                    Some(name) => {
                        properties.insert(name.to_owned(), value.clone());
                    }
                    None => return Err(super::unrecognized(key, value)),
                },
            }
        }
        let topic = topic.ok_or_else(|| invalid("a Kafka sink needs topic = '...'".into()))?;
        let brokers = brokers.ok_or_else(|| {
            invalid("a Kafka sink needs properties.bootstrap.server = 'host:port'".into())
        })?;
        let upsert = match kind {
            Some("upsert") => true,
            Some("append-only") => false,
            _ => {
                return Err(invalid(
                    "a Kafka sink needs type = 'upsert' or type = 'append-only'".into(),
                ))
            }
        };
        if upsert && primary_key.iter().all(|c| c.is_empty()) {
            return Err(invalid(
                "an upsert sink needs primary_key = 'column[, ...]': its records' key".into(),
            ));
        }
        Ok(KafkaSink {
            topic,
            brokers,
            upsert,
            primary_key,
            exactly_once,
            progress_topic,
            transactional_id,
            properties,
        })
    }

    /// Checks the sink's query: its key columns exist, and an
    /// `append-only` sink's query only inserts.
    pub(super) fn check_query(&self, columns: &[ColumnDef], append_only: bool) -> WeirResult<()> {
        super::check_keyed_query(self.upsert, &self.primary_key, columns, append_only)
    }

    /// Checks that the brokers answer and the topic exists, and creates
    /// the progress topic if it is missing.
    pub(super) async fn check_target(&self) -> WeirResult<()> {
        let sink = self.clone();
        let checked = tokio::task::spawn_blocking(move || sink.check_target_blocking())
            .await
            .map_err(|e| WeirError::new(SqlState::INTERNAL_ERROR, e.to_string()))?;
        checked.map_err(|e| match e {
            Failure::Connect(message) => WeirError::new(
                SqlState("08001"),
                format!("the Kafka sink could not reach the brokers: {message}"),
            ),
            Failure::Target(state, message) => WeirError::new(state, message),
            Failure::Deliver(message) => WeirError::new(SqlState::IO_ERROR, message),
        })
    }

    fn check_target_blocking(&self) -> Result<(), Failure> {
        let consumer: BaseConsumer = self.config().create().map_err(connect)?;
        let metadata = consumer
            .fetch_metadata(Some(&self.topic), TIMEOUT)
            .map_err(connect)?;
        let found = metadata
            .topics()
            .first()
            .is_some_and(|t| t.error().is_none() && !t.partitions().is_empty());
        if !found {
            return Err(Failure::Target(
                SqlState::UNDEFINED_OBJECT,
                format!("Kafka topic \"{}\" does not exist", self.topic),
            ));
        }
        if self.exactly_once {
            self.create_progress_topic()?;
        }
        Ok(())
    }

    /// Creates the progress topic (one partition, compacted) unless it
    /// exists.
    fn create_progress_topic(&self) -> Result<(), Failure> {
        let admin: AdminClient<DefaultClientContext> = self.config().create().map_err(connect)?;
        let topic = NewTopic::new(&self.progress_topic, 1, TopicReplication::Fixed(1))
            .set("cleanup.policy", "compact");
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let created = futures::executor::block_on(admin.create_topics([&topic], &options))
            .map_err(connect)?;
        for result in created {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    return Err(Failure::Deliver(format!(
                        "could not create the progress topic \"{name}\": {code}"
                    )))
                }
            }
        }
        Ok(())
    }

    /// The client settings: the brokers, then the user's properties.
    fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("client.id", "weir");
        for (name, value) in &self.properties {
            config.set(name, value);
        }
        config
    }

    /// A producer for sink `name`, ready to deliver (blocking: for
    /// exactly-once it fences an older producer of the sink); returns
    /// with it the newest epoch the topic holds, where the sink records
    /// one.
    pub(super) fn connect(&self, name: &str) -> Result<(KafkaProducer, Option<u64>), Failure> {
        let mut config = self.config();
        config
            .set("enable.idempotence", "true")
            .set("linger.ms", "5");
        let transactional_id = self.transactional_id(name);
        if self.exactly_once {
            config.set("transactional.id", &transactional_id);
        }
        let context = DeliveryErrors::default();
        let producer: ThreadedProducer<DeliveryErrors> = config
            .create_with_context(context.clone())
            .map_err(connect)?;
        let applied = if self.exactly_once {
            producer.init_transactions(TIMEOUT).map_err(connect)?;
            Some(self.applied_epoch(&transactional_id)?)
        } else {
            None
        };
        let producer = KafkaProducer {
            producer,
            errors: context,
            sink: self.clone(),
            transactional_id,
        };
        Ok((producer, applied))
    }

    fn transactional_id(&self, name: &str) -> String {
        self.transactional_id
            .clone()
            .unwrap_or_else(|| format!("weir-{name}"))
    }

    /// The newest epoch a committed progress record of `transactional_id`
    /// names (0: none).
    fn applied_epoch(&self, transactional_id: &str) -> Result<u64, Failure> {
        let mut config = self.config();
        config
            .set("group.id", "weir")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "false");
        let consumer: BaseConsumer = config.create().map_err(connect)?;
        // The end of each partition: its high watermark (a read_committed
        // client is told the last stable offset instead, which some
        // brokers keep behind).
        let ends_of: BaseConsumer = self.config().create().map_err(connect)?;
        let topic = &self.progress_topic;
        // A broker may answer a topic that holds records as empty for a
        // moment (nisshi does, under load, after a client connects): taken
        // at its word, the sink would think it had delivered nothing and
        // deliver its pending epochs again. So an empty answer is asked
        // again for a while; a sink that never delivered waits that long
        // once, at its first connect.
        let give_up = std::time::Instant::now() + EMPTY_PROGRESS_WAIT;
        let (assignment, ends) = loop {
            let (assignment, ends) = self.progress_ends(&consumer, &ends_of)?;
            if !ends.is_empty() || std::time::Instant::now() > give_up {
                break (assignment, ends);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        if ends.is_empty() {
            return Ok(0);
        }
        consumer.assign(&assignment).map_err(connect)?;
        let mut epoch = 0;
        let deadline = std::time::Instant::now() + TIMEOUT;
        // Transaction markers take offsets too: done once every partition
        // is read to its end.
        let mut done = BTreeMap::new();
        while done.len() < ends.len() {
            if std::time::Instant::now() > deadline {
                return Err(Failure::Connect(format!(
                    "reading progress topic \"{topic}\" took longer than {TIMEOUT:?}"
                )));
            }
            let Some(message) = consumer.poll(Duration::from_millis(200)) else {
                for (&partition, &end) in &ends {
                    let position = consumer
                        .position()
                        .ok()
                        .and_then(|p| p.find_partition(topic, partition).map(|e| e.offset()));
                    if matches!(position, Some(Offset::Offset(at)) if at >= end) {
                        done.insert(partition, ());
                    }
                }
                continue;
            };
            let message = message.map_err(connect)?;
            if message.key() == Some(transactional_id.as_bytes()) {
                if let Some(value) = message.payload() {
                    epoch = epoch.max(progress_epoch(value).unwrap_or(0));
                }
            }
            if message.offset() + 1 >= ends[&message.partition()] {
                done.insert(message.partition(), ());
            }
        }
        Ok(epoch)
    }

    /// Each partition of the progress topic that holds records, assigned
    /// from its beginning, and its end (the high watermark).
    fn progress_ends(
        &self,
        consumer: &BaseConsumer,
        ends_of: &BaseConsumer,
    ) -> Result<(TopicPartitionList, BTreeMap<i32, i64>), Failure> {
        let topic = &self.progress_topic;
        let metadata = consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(connect)?;
        let partitions = metadata
            .topics()
            .first()
            .map_or(0, |t| t.partitions().len() as i32);
        let mut assignment = TopicPartitionList::new();
        let mut ends = BTreeMap::new();
        for partition in 0..partitions {
            // The high watermark a read_committed consumer can reach: the
            // fenced producer's transaction is aborted by now.
            let (low, high) = known_watermarks(ends_of, topic, partition)?;
            if high > low {
                ends.insert(partition, high);
                assignment
                    .add_partition_offset(topic, partition, Offset::Beginning)
                    .map_err(connect)?;
            }
        }
        Ok((assignment, ends))
    }
}

/// The low and high watermarks of `partition` of `topic`. A broker that
/// could not read a partition's offsets in time answers -1 for both
/// (nisshi does, and librdkafka passes them on): that is asked again, not
/// taken for an empty partition, which would make a sink think it had
/// delivered nothing and deliver its pending epochs a second time.
fn known_watermarks(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
) -> Result<(i64, i64), Failure> {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, TIMEOUT)
            .map_err(connect)?;
        if low >= 0 && high >= 0 {
            return Ok((low, high));
        }
        if std::time::Instant::now() > deadline {
            return Err(Failure::Connect(format!(
                "the offsets of progress topic \"{topic}\" partition {partition} stayed unknown for {TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl KafkaSink {
    /// The records of `changes`: keys and values as JSON.
    fn records(&self, changes: &Changes) -> datafusion::error::Result<Records> {
        let weights = changes.weights.values();
        let values = json_lines(&changes.rows)?;
        let mut entries = Vec::new();
        if !self.upsert {
            if weights.iter().any(|&w| w < 0) {
                return Err(datafusion::error::DataFusionError::Execution(
                    "the epoch deletes rows, which an append-only sink cannot deliver".into(),
                ));
            }
            for (row, &weight) in weights.iter().enumerate() {
                entries.extend((0..weight).map(|_| (None, Some(row))));
            }
            return Ok(Records {
                keys: None,
                values,
                entries,
            });
        }
        let schema = changes.rows.schema();
        let key_columns: Vec<usize> = self
            .primary_key
            .iter()
            .filter_map(|c| schema.index_of(c).ok())
            .collect();
        let keys = json_lines(&changes.rows.project(&key_columns)?)?;
        let added: HashSet<&[u8]> = (0..weights.len())
            .filter(|&row| weights[row] > 0)
            .map(|row| keys.line(row))
            .collect();
        for (row, &weight) in weights.iter().enumerate() {
            if weight > 0 {
                entries.push((Some(row), Some(row)));
            } else if !added.contains(keys.line(row)) {
                entries.push((Some(row), None));
            }
        }
        Ok(Records {
            keys: Some(keys),
            values,
            entries,
        })
    }
}

/// The value of the progress record of `epoch`.
fn progress_record(transactional_id: &str, epoch: u64) -> String {
    serde_json::json!({ "transactional_id": transactional_id, "epoch": epoch }).to_string()
}

/// The epoch a progress record's value names.
fn progress_epoch(value: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(value)
        .ok()?
        .get("epoch")?
        .as_u64()
}

/// Failed deliveries librdkafka reported, until taken.
#[derive(Clone, Default)]
pub(super) struct DeliveryErrors(Arc<Mutex<Option<String>>>);

impl ClientContext for DeliveryErrors {}

impl ProducerContext for DeliveryErrors {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = result {
            let mut first = self.0.lock().expect("delivery errors");
            first.get_or_insert_with(|| error.to_string());
        }
    }
}

impl DeliveryErrors {
    fn take(&self) -> Option<String> {
        self.0.lock().expect("delivery errors").take()
    }
}

/// A connected producer of one sink.
pub(super) struct KafkaProducer {
    producer: ThreadedProducer<DeliveryErrors>,
    errors: DeliveryErrors,
    sink: KafkaSink,
    transactional_id: String,
}

impl KafkaProducer {
    /// Writes `epochs` (each with its changes, in order; blocking): in one
    /// transaction with a progress record naming the last, or flushed
    /// without one.
    pub(super) fn deliver(&self, epochs: &[(u64, Changes)]) -> Result<(), Failure> {
        let (Some((first, _)), Some((epoch, _))) = (epochs.first(), epochs.last()) else {
            return Ok(());
        };
        let span = if first == epoch {
            format!("epoch {epoch}")
        } else {
            format!("epochs {first} to {epoch}")
        };
        let failed = |e: String| Failure::Deliver(format!("{span}: {e}"));
        let records = epochs
            .iter()
            .map(|(_, changes)| self.sink.records(changes))
            .collect::<datafusion::error::Result<Vec<_>>>()
            .map_err(|e| failed(e.to_string()))?;
        let epoch = *epoch;
        self.errors.take();
        if self.sink.exactly_once {
            self.producer
                .begin_transaction()
                .map_err(|e| failed(e.to_string()))?;
            let written = self.send_all(&records, epoch).and_then(|()| {
                self.producer
                    .commit_transaction(TIMEOUT)
                    .map_err(|e| e.to_string())
            });
            if let Err(error) = written {
                // An abort that fails leaves the producer fenced or
                // broken; the next attempt connects again.
                let _ = self.producer.abort_transaction(TIMEOUT);
                return Err(failed(error));
            }
        } else {
            self.send_all(&records, epoch).map_err(failed)?;
            self.producer
                .flush(TIMEOUT)
                .map_err(|e| failed(e.to_string()))?;
        }
        match self.errors.take() {
            Some(error) => Err(failed(error)),
            None => Ok(()),
        }
    }

    /// Queues every record, and for exactly-once the progress record of
    /// `epoch`.
    fn send_all(&self, records: &[Records], epoch: u64) -> Result<(), String> {
        for (key, value) in records.iter().flat_map(Records::iter) {
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.sink.topic);
            if let Some(key) = key {
                record = record.key(key);
            }
            if let Some(value) = value {
                record = record.payload(value);
            }
            self.send(record)?;
        }
        if self.sink.exactly_once {
            let value = progress_record(&self.transactional_id, epoch);
            let record = BaseRecord::to(&self.sink.progress_topic)
                .key(self.transactional_id.as_bytes())
                .payload(value.as_bytes());
            self.send(record)?;
        }
        Ok(())
    }

    /// Queues one record, waiting while librdkafka's queue is full.
    fn send(&self, mut record: BaseRecord<'_, [u8], [u8]>) -> Result<(), String> {
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((error, _)) => return Err(error.to_string()),
            }
        }
    }
}

/// Each row of a batch as one JSON object (NULLs written out).
struct JsonLines {
    text: Vec<u8>,
    ends: Vec<usize>,
}

impl JsonLines {
    fn line(&self, row: usize) -> &[u8] {
        let start = if row == 0 { 0 } else { self.ends[row - 1] + 1 };
        &self.text[start..self.ends[row]]
    }
}

fn json_lines(rows: &RecordBatch) -> datafusion::error::Result<JsonLines> {
    // The writer leaves out a batch with no columns; a key of none is
    // an empty object.
    if rows.num_columns() == 0 {
        let text = b"{}\n".repeat(rows.num_rows());
        let ends = (0..rows.num_rows()).map(|r| r * 3 + 2).collect();
        return Ok(JsonLines { text, ends });
    }
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, LineDelimited>(Vec::new());
    writer.write(rows)?;
    writer.finish()?;
    let text = writer.into_inner();
    // A JSON string escapes its line breaks, so each newline ends a row.
    let ends: Vec<usize> = text
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .map(|(i, _)| i)
        .collect();
    debug_assert_eq!(ends.len(), rows.num_rows());
    Ok(JsonLines { text, ends })
}

/// An epoch's records: a key and a value each (`None` value: a
/// tombstone), as rows of the encoded keys and values.
struct Records {
    keys: Option<JsonLines>,
    values: JsonLines,
    /// Each record's key row and value row.
    entries: Vec<(Option<usize>, Option<usize>)>,
}

impl Records {
    fn iter(&self) -> impl Iterator<Item = (Option<&[u8]>, Option<&[u8]>)> {
        self.entries.iter().map(|&(key, value)| {
            (
                key.and_then(|row| self.keys.as_ref().map(|k| k.line(row))),
                value.map(|row| self.values.line(row)),
            )
        })
    }
}

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

fn connect(error: KafkaError) -> Failure {
    Failure::Connect(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_records_name_their_epoch() {
        assert_eq!(
            progress_epoch(progress_record("weir-s", 42).as_bytes()),
            Some(42)
        );
        assert_eq!(progress_epoch(b"{}"), None);
    }

    fn records_of(
        sink: &KafkaSink,
        ids: &[i32],
        names: &[&str],
        weights: &[i64],
    ) -> datafusion::error::Result<Vec<String>> {
        use datafusion::arrow::array::{Int32Array, Int64Array, StringArray};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        let schema = std::sync::Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let rows = RecordBatch::try_new(
            schema,
            vec![
                std::sync::Arc::new(Int32Array::from(ids.to_vec())),
                std::sync::Arc::new(StringArray::from(names.to_vec())),
            ],
        )
        .unwrap();
        let changes = Changes::new(rows, Int64Array::from(weights.to_vec())).unwrap();
        let text =
            |b: Option<&[u8]>| b.map_or("-".to_owned(), |b| String::from_utf8_lossy(b).into());
        Ok(sink
            .records(&changes)?
            .iter()
            .map(|(key, value)| format!("{} {}", text(key), text(value)))
            .collect())
    }

    #[test]
    fn upserts_send_new_values_and_tombstones_for_keys_that_went() {
        let sink = KafkaSink::parse(&[
            ("topic".into(), "t".into()),
            ("properties.bootstrap.server".into(), "b:1".into()),
            ("type".into(), "upsert".into()),
            ("primary_key".into(), "id".into()),
        ])
        .unwrap();
        // Row 1 is updated (removed and added again), row 2 deleted, row
        // 3 inserted.
        let records = records_of(
            &sink,
            &[1, 1, 2, 3],
            &["a", "b", "c", "d\n"],
            &[-1, 1, -1, 1],
        )
        .unwrap();
        assert_eq!(
            records,
            [
                r#"{"id":1} {"id":1,"name":"b"}"#,
                r#"{"id":2} -"#,
                r#"{"id":3} {"id":3,"name":"d\n"}"#,
            ]
        );
    }

    #[test]
    fn appends_send_each_row_as_often_as_it_was_added() {
        let sink = KafkaSink::parse(&[
            ("topic".into(), "t".into()),
            ("properties.bootstrap.server".into(), "b:1".into()),
            ("type".into(), "append-only".into()),
        ])
        .unwrap();
        let records = records_of(&sink, &[1, 2], &["a", "b"], &[2, 1]).unwrap();
        assert_eq!(
            records,
            [
                r#"- {"id":1,"name":"a"}"#,
                r#"- {"id":1,"name":"a"}"#,
                r#"- {"id":2,"name":"b"}"#,
            ]
        );
        let error = records_of(&sink, &[1], &["a"], &[-1]).unwrap_err();
        assert!(error.to_string().contains("append-only"), "{error}");
    }

    #[test]
    fn options_are_checked() {
        let options = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let base = [
            ("topic", "t"),
            ("properties.bootstrap.server", "b:1"),
            ("type", "upsert"),
            ("primary_key", "id"),
        ];
        let sink = KafkaSink::parse(&options(&base)).unwrap();
        assert!(sink.exactly_once && sink.upsert);
        let mut at_least = base.to_vec();
        at_least.push(("delivery", "at-least-once"));
        assert!(!KafkaSink::parse(&options(&at_least)).unwrap().exactly_once);
        for (change, expected) in [
            (("type", "both"), "type"),
            (("delivery", "maybe"), "delivery"),
            (("format", "avro"), "json"),
            (("colour", "red"), "colour"),
        ] {
            let mut pairs = base.to_vec();
            pairs.push(change);
            let error = KafkaSink::parse(&options(&pairs)).unwrap_err().to_string();
            assert!(error.contains(expected), "{change:?}: {error}");
        }
    }
}
