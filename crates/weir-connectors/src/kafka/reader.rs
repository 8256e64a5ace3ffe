//! A Kafka reader: a thread that consumes assigned partitions and decodes
//! their records into batches, and the stream the runtime polls.
//!
//! The thread blocks in librdkafka's poll, so it runs beside the tokio
//! runtime rather than on it, and hands each batch over a bounded
//! channel with the partitions' positions after it; when the view falls
//! behind, the channel fills and the thread stops consuming. A batch
//! holds the records that had arrived when the thread looked, up to the
//! runtime's batch size.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use futures::Stream;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tracing::warn;
use weir_stream::runtime::{ReadFrom, SourceReader};

use super::metadata::{Origins, RowShape};
use super::options::{KafkaOptions, Startup};
use crate::dead_letters::RecordPlace;
use crate::records::{Decoder, Rejects, Values};

/// How many decoded batches may wait for the view.
const CHANNEL_BATCHES: usize = 2;

/// How long the thread waits for a record before it looks whether the
/// reader is still wanted.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// How long pinning a start offset may take before it is tried again.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A batch and the positions of the reader's splits after it.
type Decoded = Result<(RecordBatch, Vec<u64>), DataFusionError>;

/// The runtime's end of a Kafka reader. Dropping it stops the thread.
pub(super) struct KafkaReader {
    batches: mpsc::Receiver<Decoded>,
    /// After the last batch returned; before the first, what the thread
    /// pinned as it opened (see `started`).
    positions: Vec<u64>,
    /// Where a bounded read stops, per split it reads.
    until: Option<Vec<u64>>,
    /// The positions the thread pinned for partitions read for the first
    /// time, once it has.
    started: Arc<Mutex<Option<Vec<u64>>>>,
    returned: bool,
}

impl KafkaReader {
    /// Whether a bounded read has read every split to its bound.
    fn reached_bounds(&self) -> bool {
        self.until.as_ref().is_some_and(|until| {
            let positions = self.positions();
            positions.iter().zip(until).all(|(at, until)| at >= until)
        })
    }
}

impl KafkaReader {
    /// Starts a thread that reads `from.splits` of `options.topic` at
    /// their positions.
    pub(super) fn spawn(
        options: &KafkaOptions,
        decoder: Decoder,
        shape: RowShape,
        from: &ReadFrom,
        rejects: Rejects,
    ) -> Result<Self, KafkaError> {
        let consumer: BaseConsumer = options.consumer_config().create()?;
        let positions: Vec<u64> = from
            .splits
            .iter()
            .map(|&s| from.positions[s as usize])
            .collect();
        let until: Option<Vec<u64>> = from.until.as_ref().map(|until| {
            from.splits
                .iter()
                .map(|&s| until.get(s as usize).copied().unwrap_or(0))
                .collect()
        });
        let (sender, batches) = mpsc::channel(CHANNEL_BATCHES);
        let started = Arc::new(Mutex::new(None));
        let thread = ConsumerThread {
            consumer,
            options: options.clone(),
            decoder,
            shape,
            splits: from.splits.clone(),
            positions: positions.clone(),
            until: until.clone(),
            max_rows: from.max_batch_rows.max(1),
            sender,
            started: started.clone(),
            rejects,
            runtime: tokio::runtime::Handle::current(),
        };
        std::thread::Builder::new()
            .name(format!("weir-kafka-{}", options.topic))
            .spawn(move || thread.run())
            .map_err(|e| KafkaError::ClientCreation(e.to_string()))?;
        Ok(KafkaReader {
            batches,
            positions,
            until,
            started,
            returned: false,
        })
    }
}

impl Stream for KafkaReader {
    type Item = weir_stream::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.reached_bounds() {
            return Poll::Ready(None);
        }
        match self.batches.poll_recv(cx) {
            Poll::Ready(Some(Ok((rows, positions)))) => {
                self.positions = positions;
                self.returned = true;
                // Records that were all bad, and offsets that hold no
                // record (`skip_markers`), come as a batch without rows:
                // the runtime takes the positions only.
                Poll::Ready(Some(Ok(rows)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(Some(Err(DataFusionError::Execution(
                "the Kafka reader stopped".into(),
            )))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl SourceReader for KafkaReader {
    fn positions(&self) -> Vec<u64> {
        if !self.returned {
            if let Some(started) = self.started.lock().expect("start lock").as_ref() {
                return started.clone();
            }
        }
        self.positions.clone()
    }

    /// Records the consumer thread has fetched wait in the channel.
    fn has_rows_waiting(&self) -> bool {
        !self.batches.is_empty()
    }
}

/// What the consumer thread owns.
struct ConsumerThread {
    consumer: BaseConsumer,
    options: KafkaOptions,
    decoder: Decoder,
    shape: RowShape,
    splits: Vec<u32>,
    positions: Vec<u64>,
    /// Where a bounded read stops, per split: records at or after it are
    /// left for the shared reader.
    until: Option<Vec<u64>>,
    max_rows: usize,
    sender: mpsc::Sender<Decoded>,
    started: Arc<Mutex<Option<Vec<u64>>>>,
    rejects: Rejects,
    /// Where dead letters are stored from this thread.
    runtime: tokio::runtime::Handle,
}

impl ConsumerThread {
    fn run(mut self) {
        if let Err(e) = self.start() {
            let _ = self.sender.blocking_send(Err(e));
            return;
        }
        let index: HashMap<i32, usize> = self
            .splits
            .iter()
            .enumerate()
            .map(|(i, &s)| (s as i32, i))
            .collect();
        let mut values = Values::default();
        let mut origins = Origins::default();
        while !self.sender.is_closed() {
            let wait = if values.is_empty() {
                IDLE_POLL
            } else {
                Duration::ZERO
            };
            let more_waiting = match self.consumer.poll(wait) {
                Some(Ok(message)) => {
                    let Some(&i) = index.get(&message.partition()) else {
                        continue;
                    };
                    let position = message.offset() as u64 + 2;
                    if self.until.as_ref().is_some_and(|until| position > until[i]) {
                        continue;
                    }
                    self.decoder
                        .push(&mut values, message.payload().unwrap_or_default());
                    let key = self.shape.includes_key().then(|| message.key()).flatten();
                    let timestamp = message.timestamp().to_millis();
                    origins.push(message.partition(), message.offset(), timestamp, key);
                    self.positions[i] = position;
                    values.len() < self.max_rows
                }
                Some(Err(error)) => {
                    if let Some(fatal) = fatal(&error) {
                        let _ = self.sender.blocking_send(Err(fatal));
                        return;
                    }
                    // librdkafka reconnects and retries by itself.
                    warn!(topic = %self.options.topic, %error, "Kafka consumer error; retrying");
                    true
                }
                None => {
                    if values.is_empty() && self.skip_markers() && !self.send_positions() {
                        return;
                    }
                    false
                }
            };
            // A full batch, or nothing more waiting: hand over what has
            // arrived.
            if !more_waiting && !values.is_empty() && !self.flush(&mut values, &mut origins) {
                return;
            }
        }
    }

    /// Moves the positions past offsets that hold no record, once the
    /// consumer stands after them: transaction markers (a topic a
    /// transactional producer, such as an exactly-once sink, writes to)
    /// and records compaction removed. Without it a reader's position
    /// would stay at its last record while a position pinned from the
    /// partition's end (`latest`, `timestamp`) stands after the marker,
    /// and a bounded read to that position would never end. True if a
    /// position moved (a batch without rows then reports it).
    fn skip_markers(&mut self) -> bool {
        let Ok(consumed) = self.consumer.position() else {
            return false;
        };
        let mut moved = false;
        for (i, &split) in self.splits.iter().enumerate() {
            let Some(Offset::Offset(next)) = consumed
                .find_partition(&self.options.topic, split as i32)
                .map(|p| p.offset())
            else {
                continue;
            };
            let mut position = next as u64 + 1;
            if let Some(until) = &self.until {
                position = position.min(until[i]);
            }
            if position > self.positions[i] {
                self.positions[i] = position;
                moved = true;
            }
        }
        moved
    }

    /// Pins where unread partitions start and assigns every partition at
    /// its position; retries while the brokers cannot answer.
    fn start(&mut self) -> Result<(), DataFusionError> {
        while let Err(error) = self.pin_start() {
            if self.sender.is_closed() {
                return Ok(());
            }
            warn!(topic = %self.options.topic, %error, "Kafka: cannot find start offsets; retrying");
            std::thread::sleep(Duration::from_secs(1));
        }
        *self.started.lock().expect("start lock") = Some(self.positions.clone());
        let mut assignment = TopicPartitionList::new();
        for (&split, &position) in self.splits.iter().zip(&self.positions) {
            let offset = match position {
                0 => Offset::Beginning,
                next => Offset::Offset(next as i64 - 1),
            };
            assignment
                .add_partition_offset(&self.options.topic, split as i32, offset)
                .map_err(|e| DataFusionError::Execution(e.to_string()))?;
        }
        self.consumer
            .assign(&assignment)
            .map_err(|e| DataFusionError::Execution(format!("Kafka assign: {e}")))
    }

    /// Gives each partition not read before a concrete start for
    /// `latest` and `timestamp` (`earliest` stays at the beginning,
    /// which is concrete already).
    fn pin_start(&mut self) -> Result<(), KafkaError> {
        let topic = &self.options.topic;
        let unread: Vec<usize> = (0..self.splits.len())
            .filter(|&i| self.positions[i] == 0)
            .collect();
        match self.options.startup {
            Startup::Earliest => {}
            Startup::Latest => {
                for &i in &unread {
                    let (_, high) = self.consumer.fetch_watermarks(
                        topic,
                        self.splits[i] as i32,
                        START_TIMEOUT,
                    )?;
                    self.positions[i] = high as u64 + 1;
                }
            }
            Startup::Timestamp(millis) => {
                let mut query = TopicPartitionList::new();
                for &i in &unread {
                    query.add_partition_offset(
                        topic,
                        self.splits[i] as i32,
                        Offset::Offset(millis),
                    )?;
                }
                let found = self.consumer.offsets_for_times(query, START_TIMEOUT)?;
                for &i in &unread {
                    let partition = self.splits[i] as i32;
                    let offset = match found.find_partition(topic, partition).map(|p| p.offset()) {
                        Some(Offset::Offset(offset)) => offset,
                        // No record that late: start after the newest.
                        _ => {
                            self.consumer
                                .fetch_watermarks(topic, partition, START_TIMEOUT)?
                                .1
                        }
                    };
                    self.positions[i] = offset as u64 + 1;
                }
            }
        }
        Ok(())
    }

    /// Sends the positions alone, in a batch without rows; false once
    /// the reader is gone.
    fn send_positions(&self) -> bool {
        let none = RecordBatch::new_empty(Arc::new(Schema::empty()));
        self.sender
            .blocking_send(Ok((none, self.positions.clone())))
            .is_ok()
    }

    /// Decodes the gathered values and sends their rows; false once the
    /// reader is gone or the source failed.
    fn flush(&mut self, values: &mut Values, origins: &mut Origins) -> bool {
        let (rows, bad) = self.decoder.decode(values);
        // Dead letters are stored before the rows after them leave.
        let handled = self
            .runtime
            .block_on(self.rejects.handle(values, &bad, |i| {
                let (partition, offset) = origins.place(i);
                RecordPlace {
                    key: format!("p{partition:05}-o{offset:020}"),
                    text: format!("partition {partition} offset {offset}"),
                    split: partition as u32,
                    // A split's position is its next offset plus one.
                    passed_at: offset as u64 + 2,
                }
            }));
        let rows = handled.and_then(|()| {
            self.shape
                .assemble(rows, origins, &bad)
                .map_err(DataFusionError::from)
        });
        let failed = rows.is_err();
        let sent = rows.map(|rows| (rows, self.positions.clone()));
        let sent = self.sender.blocking_send(sent).is_ok() && !failed;
        values.clear();
        origins.clear();
        sent
    }
}

/// The error to fail the source with, if `error` is not one librdkafka
/// recovers from.
fn fatal(error: &KafkaError) -> Option<DataFusionError> {
    let code = error.rdkafka_error_code()?;
    matches!(
        code,
        RDKafkaErrorCode::AutoOffsetReset
            | RDKafkaErrorCode::OffsetOutOfRange
            | RDKafkaErrorCode::TopicAuthorizationFailed
    )
    .then(|| {
        DataFusionError::Execution(format!(
            "Kafka: {error} (a checkpointed offset the broker no longer holds, or no access)"
        ))
    })
}
