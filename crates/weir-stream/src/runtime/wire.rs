//! Values that cross between timely workers, and so between processes:
//! Arrow data travels as Arrow IPC bytes, errors as their message.
//!
//! Within a process timely moves these values as they are (a clone of a
//! record batch shares its buffers); only a message to another process is
//! serialized, so an error keeps its type unless it crosses processes.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use serde::de::{Error as _, Visitor};
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use weir_state::DeltaBatches;

use super::batch::{decode, encode};
use super::view::MemoryBudgetExceeded;
use super::FailureReason;
use crate::Changes;

/// A record batch, sent as an Arrow IPC stream.
#[derive(Debug, Clone)]
pub struct IpcBatch(pub RecordBatch);

impl Serialize for IpcBatch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = encode(&Changes::inserts(self.0.clone())).map_err(S::Error::custom)?;
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for IpcBatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let changes = WireChanges::deserialize(deserializer)?;
        Ok(IpcBatch(changes.0.rows))
    }
}

/// Changes (rows and weights), sent as one Arrow IPC stream whose last
/// column holds the weights.
#[derive(Debug, Clone)]
pub struct WireChanges(pub Changes);

impl Serialize for WireChanges {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = encode(&self.0).map_err(S::Error::custom)?;
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for WireChanges {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bytes = deserializer.deserialize_byte_buf(BytesVisitor)?;
        decode(&bytes).map(WireChanges).map_err(D::Error::custom)
    }
}

struct BytesVisitor;

impl<'de> Visitor<'de> for BytesVisitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Arrow IPC bytes")
    }

    fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
        Ok(bytes.to_vec())
    }

    fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(bytes)
    }
}

/// A state table's delta of one epoch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireDelta {
    upserts: Option<IpcBatch>,
    deletes: Option<IpcBatch>,
}

impl From<DeltaBatches> for WireDelta {
    fn from(delta: DeltaBatches) -> Self {
        WireDelta {
            upserts: delta.upserts.map(IpcBatch),
            deletes: delta.deletes.map(IpcBatch),
        }
    }
}

impl From<WireDelta> for DeltaBatches {
    fn from(delta: WireDelta) -> Self {
        DeltaBatches {
            upserts: delta.upserts.map(|b| b.0),
            deletes: delta.deletes.map(|b| b.0),
        }
    }
}

/// Why a view's instance in a worker stopped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireFailure {
    /// Its operators failed.
    Error(WireError),
    /// A source's reader failed or stopped.
    Source {
        /// The source.
        source: String,
        /// What the reader reported.
        error: Option<WireError>,
    },
}

impl WireFailure {
    /// The reason the coordinator records.
    pub fn into_reason(self) -> FailureReason {
        match self {
            WireFailure::Error(e) => FailureReason::Error(e.into_error()),
            WireFailure::Source { source, error } => FailureReason::Source {
                source,
                error: error.map(WireError::into_error),
            },
        }
    }
}

/// An error that may cross processes: in its own process it is the error
/// itself; in another, an execution error with its message (a view's
/// memory budget keeps its type, and so its SQLSTATE).
#[derive(Debug, Clone)]
pub struct WireError(Arc<DataFusionError>);

impl WireError {
    /// Wraps `error`.
    pub fn new(error: DataFusionError) -> Self {
        WireError(Arc::new(error))
    }

    /// The error, unwrapped if nothing else holds it.
    pub fn into_error(self) -> DataFusionError {
        Arc::try_unwrap(self.0)
            .unwrap_or_else(|shared| DataFusionError::Execution(shared.to_string()))
    }
}

#[derive(Serialize, Deserialize)]
enum ErrorForm {
    Memory {
        view: String,
        used: usize,
        budget: usize,
    },
    Message(String),
}

impl Serialize for WireError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let root = self.0.find_root();
        let memory = match root {
            DataFusionError::External(inner) => inner.downcast_ref::<MemoryBudgetExceeded>(),
            _ => None,
        };
        let form = match memory {
            Some(m) => ErrorForm::Memory {
                view: m.view.clone(),
                used: m.used,
                budget: m.budget,
            },
            // The message as the server words an error of its own
            // process (without DataFusion's variant prefix).
            None => ErrorForm::Message(match root {
                DataFusionError::Execution(message) => message.clone(),
                DataFusionError::ArrowError(error, _) => error.to_string(),
                other => other.to_string(),
            }),
        };
        form.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for WireError {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let error = match ErrorForm::deserialize(deserializer)? {
            ErrorForm::Memory { view, used, budget } => {
                DataFusionError::External(Box::new(MemoryBudgetExceeded { view, used, budget }))
            }
            ErrorForm::Message(message) => DataFusionError::Execution(message),
        };
        Ok(WireError::new(error))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn changes() -> Changes {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
            ],
        )
        .unwrap();
        Changes::new(rows, Int64Array::from(vec![1, -1])).unwrap()
    }

    #[test]
    fn changes_and_deltas_survive_bincode() {
        let sent = (
            WireChanges(changes()),
            WireDelta::from(DeltaBatches {
                upserts: Some(changes().rows),
                deletes: None,
            }),
        );
        let bytes = bincode::serialize(&sent).unwrap();
        let (got, delta): (WireChanges, WireDelta) = bincode::deserialize(&bytes).unwrap();
        assert_eq!(got.0.rows, sent.0 .0.rows);
        assert_eq!(got.0.weights, sent.0 .0.weights);
        let delta = DeltaBatches::from(delta);
        assert_eq!(delta.upserts.unwrap(), changes().rows);
        assert!(delta.deletes.is_none());
    }

    #[test]
    fn a_memory_failure_keeps_its_type_across_processes() {
        let error = DataFusionError::External(Box::new(MemoryBudgetExceeded {
            view: "v".into(),
            used: 10 << 20,
            budget: 1 << 20,
        }));
        let bytes = bincode::serialize(&WireError::new(error)).unwrap();
        let back: WireError = bincode::deserialize(&bytes).unwrap();
        let DataFusionError::External(inner) = back.into_error() else {
            panic!("an external error")
        };
        assert_eq!(
            inner.downcast_ref::<MemoryBudgetExceeded>().unwrap().budget,
            1 << 20
        );
        let bytes =
            bincode::serialize(&WireError::new(DataFusionError::Execution("boom".into()))).unwrap();
        let back: WireError = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back.into_error().to_string(), "Execution error: boom");
    }
}
