//! [`ChangeBatch`]: the container timely moves between operators and
//! workers, and [`KeyRouter`], which exchanges it by key.

use std::cell::OnceCell;
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use timely::dataflow::channels::pushers::exchange::Distributor;
use timely::dataflow::channels::{ContainerBytes, Message};
use timely::progress::Stamp;

use crate::{Changes, Exchange, Placement};

/// Change batches of one timestamp. Within a process they move as they
/// are; between processes each `Changes` travels as an Arrow IPC stream
/// (the weights as a last column), prefixed by its length and padded to 8
/// bytes, encoded once when timely asks for its length.
#[derive(Clone, Default)]
pub struct ChangeBatch(pub Vec<Changes>, OnceCell<Vec<u8>>);

impl ChangeBatch {
    /// A container of `changes`.
    pub fn new(changes: Vec<Changes>) -> Self {
        ChangeBatch(changes, OnceCell::new())
    }

    fn encoded(&self) -> &[u8] {
        self.1.get_or_init(|| {
            let mut out = Vec::new();
            for changes in &self.0 {
                let ipc = encode(changes).expect("an in-memory Arrow IPC stream");
                out.extend_from_slice(&(ipc.len() as u64).to_le_bytes());
                out.extend_from_slice(&ipc);
                out.resize(out.len().next_multiple_of(8), 0);
            }
            out
        })
    }
}

pub(super) fn encode(changes: &Changes) -> crate::Result<Vec<u8>> {
    let mut fields = changes.rows.schema().fields().to_vec();
    fields.push(Arc::new(Field::new("__weight", DataType::Int64, false)));
    let mut columns = changes.rows.columns().to_vec();
    columns.push(Arc::new(changes.weights.clone()));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
    let mut ipc = Vec::new();
    let mut writer = StreamWriter::try_new(&mut ipc, &batch.schema())?;
    writer.write(&batch)?;
    writer.finish()?;
    drop(writer);
    Ok(ipc)
}

pub(super) fn decode(ipc: &[u8]) -> crate::Result<Changes> {
    let mut rows = StreamReader::try_new(ipc, None)?
        .next()
        .ok_or_else(|| datafusion::error::DataFusionError::Internal("empty IPC stream".into()))??;
    let weights = rows.column(rows.num_columns() - 1).as_primitive().clone();
    rows.remove_column(rows.num_columns() - 1);
    Changes::new(rows, weights)
}

impl timely::Accountable for ChangeBatch {
    fn record_count(&self) -> i64 {
        self.0.iter().map(|c| c.len() as i64).sum()
    }
}

impl ContainerBytes for ChangeBatch {
    fn from_bytes(bytes: timely::bytes::arc::Bytes) -> Self {
        let mut rest: &[u8] = &bytes[..];
        let mut changes = Vec::new();
        while rest.len() >= 8 {
            let len = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes")) as usize;
            changes.push(decode(&rest[8..8 + len]).expect("a batch this build encoded"));
            rest = &rest[(8 + len).next_multiple_of(8)..];
        }
        ChangeBatch::new(changes)
    }

    fn length_in_bytes(&self) -> usize {
        self.encoded().len()
    }

    fn into_bytes<W: std::io::Write>(&self, writer: &mut W) {
        writer
            .write_all(self.encoded())
            .expect("timely's buffers take the bytes");
    }
}

/// Sends each row to the worker that owns its key: the exchange's key
/// columns are evaluated, hashed once, and the batch is cut by owner with
/// one `take` ([`Placement::split`]).
pub struct KeyRouter {
    exchange: Exchange,
    placement: Placement,
}

impl KeyRouter {
    /// Routes by `exchange` over `workers` workers.
    pub fn new(exchange: Exchange, workers: usize) -> Self {
        KeyRouter {
            exchange,
            placement: Placement::new(workers),
        }
    }

    /// Each worker's share; everything to worker 0 if the key cannot be
    /// computed (the operator there meets the same error and fails the
    /// view).
    fn shares(&self, changes: Changes) -> Vec<Option<Changes>> {
        let split = self
            .exchange
            .keys(&changes.rows)
            .and_then(|keys| self.placement.split(&changes, &keys));
        match split {
            Ok(shares) => shares,
            Err(_) => {
                let mut shares = vec![None; self.placement.workers()];
                shares[0] = Some(changes);
                shares
            }
        }
    }
}

impl Distributor<ChangeBatch> for KeyRouter {
    fn partition<T: Clone, P: timely::communication::Push<Message<T, ChangeBatch>>>(
        &mut self,
        container: &mut ChangeBatch,
        stamp: &Stamp<T>,
        pushers: &mut [P],
    ) {
        for changes in container.0.drain(..) {
            for (worker, share) in self.shares(changes).into_iter().enumerate() {
                if let Some(share) = share {
                    Message::push_at(
                        &mut ChangeBatch::new(vec![share]),
                        stamp.clone(),
                        &mut pushers[worker],
                    );
                }
            }
        }
    }

    fn flush<T: Clone, P: timely::communication::Push<Message<T, ChangeBatch>>>(
        &mut self,
        _stamp: &Stamp<T>,
        _pushers: &mut [P],
    ) {
    }
}
