//! Avro binary datums of one writer schema, given in a source's options
//! (no schema registry), decoded by arrow-avro's push decoder.
//!
//! arrow-avro decodes framed datums (single-object encoding or
//! Confluent's wire format with a registry's ids). A record value here
//! is a bare datum, or (`avro-confluent`) one behind Confluent's 5-byte
//! header whose schema id is not looked up: each value is framed with the
//! single-object marker and the writer schema's fingerprint, so that a
//! batch of values is one input for the decoder.

use arrow_avro::reader::ReaderBuilder;
use arrow_avro::schema::{AvroSchema, Fingerprint, SchemaStore, SINGLE_OBJECT_MAGIC};
use datafusion::arrow::datatypes::SchemaRef;

/// The length of Confluent's header: a zero byte and a 4-byte schema id.
const CONFLUENT_HEADER: usize = 5;

/// Avro values of one writer schema.
#[derive(Debug, Clone)]
pub struct AvroFormat {
    store: SchemaStore,
    fingerprint: Fingerprint,
    /// The single-object marker and the schema's fingerprint, put before
    /// each value.
    frame: [u8; 10],
    /// Whether values carry Confluent's header, to strip.
    confluent: bool,
}

impl PartialEq for AvroFormat {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint && self.confluent == other.confluent
    }
}

impl Eq for AvroFormat {}

impl AvroFormat {
    /// The writer schema `schema` (Avro's JSON form); `confluent`: values
    /// carry Confluent's header.
    pub fn new(schema: &str, confluent: bool) -> Result<Self, String> {
        let mut store = SchemaStore::new();
        let fingerprint = store
            .register(AvroSchema::new(schema.to_owned()))
            .map_err(|e| format!("avro.schema is not an Avro schema: {e}"))?;
        let Fingerprint::Rabin(rabin) = fingerprint else {
            return Err("avro.schema: an unexpected fingerprint".into());
        };
        let mut frame = [0; 10];
        frame[..2].copy_from_slice(&SINGLE_OBJECT_MAGIC);
        frame[2..].copy_from_slice(&rabin.to_le_bytes());
        let format = AvroFormat {
            store,
            fingerprint,
            frame,
            confluent,
        };
        // The schema must map to Arrow types.
        format.decoder(1)?;
        Ok(format)
    }

    /// A decoder of up to `rows` datums.
    pub(crate) fn decoder(&self, rows: usize) -> Result<arrow_avro::reader::Decoder, String> {
        ReaderBuilder::new()
            .with_writer_schema_store(self.store.clone())
            .with_active_fingerprint(self.fingerprint)
            .with_batch_size(rows)
            .build_decoder()
            .map_err(|e| format!("avro.schema: {e}"))
    }

    /// The columns its datums decode into.
    pub fn arrow_schema(&self) -> Result<SchemaRef, String> {
        Ok(self.decoder(1)?.schema())
    }

    /// The frame to put before `value`, and the datum in it; `None` for
    /// a value without the Confluent header it should have (left
    /// unframed, so that it does not decode).
    pub(crate) fn framed<'a>(&self, value: &'a [u8]) -> Option<(&[u8; 10], &'a [u8])> {
        if !self.confluent {
            return Some((&self.frame, value));
        }
        match value {
            [0, ..] if value.len() >= CONFLUENT_HEADER => {
                Some((&self.frame, &value[CONFLUENT_HEADER..]))
            }
            _ => None,
        }
    }
}
