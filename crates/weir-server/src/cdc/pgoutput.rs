//! Decoding of `pgoutput` (protocol version 1) row messages: the relation
//! descriptions and the inserts, updates, deletes and truncates between a
//! transaction's Begin and Commit (which `pgwire-replication` decodes
//! itself). Values arrive in text form, as PostgreSQL's output functions
//! print them.

use bytes::{Buf, Bytes};

/// One column value of a row message.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A TOASTed value the update did not change: it is not sent.
    Unchanged,
    /// The value as text.
    Text(String),
}

/// A row's values, in the relation's column order.
pub type Tuple = Vec<Value>;

/// A table as the upstream describes it before its first change (and
/// again after its schema changes).
#[derive(Debug, Clone, PartialEq)]
pub struct Relation {
    /// The table's OID, which row messages name it by.
    pub id: u32,
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub name: String,
    /// Its column names, in order.
    pub columns: Vec<String>,
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A table's description.
    Relation(Relation),
    /// A new row.
    Insert {
        /// The table's OID.
        relation: u32,
        /// The row.
        new: Tuple,
    },
    /// A changed row; `old` holds the old key (or the old row, with
    /// `REPLICA IDENTITY FULL`) when the key changed or the identity is
    /// full.
    Update {
        /// The table's OID.
        relation: u32,
        /// The old key or row, if sent.
        old: Option<Tuple>,
        /// The new row.
        new: Tuple,
    },
    /// A deleted row: its key (or whole row with `REPLICA IDENTITY
    /// FULL`; the other columns NULL).
    Delete {
        /// The table's OID.
        relation: u32,
        /// The old key or row.
        old: Tuple,
    },
    /// `TRUNCATE` of these tables.
    Truncate {
        /// The tables' OIDs.
        relations: Vec<u32>,
    },
    /// A message that changes no row (type, origin, logical message,
    /// transaction boundaries).
    Other,
}

/// A malformed message.
#[derive(Debug, thiserror::Error)]
#[error("malformed pgoutput message: {0}")]
pub struct DecodeError(String);

/// Decodes one `XLogData` payload.
pub fn decode(data: &Bytes) -> Result<Message, DecodeError> {
    let mut reader = Reader(data.clone());
    let tag = reader.u8()?;
    Ok(match tag {
        b'R' => {
            let id = reader.u32()?;
            let schema = reader.string()?;
            let name = reader.string()?;
            let _replica_identity = reader.u8()?;
            let count = reader.u16()?;
            let mut columns = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let _flags = reader.u8()?;
                columns.push(reader.string()?);
                let _type_oid = reader.u32()?;
                let _type_modifier = reader.u32()?;
            }
            Message::Relation(Relation {
                id,
                schema,
                name,
                columns,
            })
        }
        b'I' => {
            let relation = reader.u32()?;
            reader.expect(b'N')?;
            Message::Insert {
                relation,
                new: reader.tuple()?,
            }
        }
        b'U' => {
            let relation = reader.u32()?;
            let mut old = None;
            let mut marker = reader.u8()?;
            if marker == b'K' || marker == b'O' {
                old = Some(reader.tuple()?);
                marker = reader.u8()?;
            }
            if marker != b'N' {
                return Err(DecodeError(format!(
                    "update: expected 'N', found {marker:#04x}"
                )));
            }
            Message::Update {
                relation,
                old,
                new: reader.tuple()?,
            }
        }
        b'D' => {
            let relation = reader.u32()?;
            let marker = reader.u8()?;
            if marker != b'K' && marker != b'O' {
                return Err(DecodeError(format!(
                    "delete: expected 'K' or 'O', found {marker:#04x}"
                )));
            }
            Message::Delete {
                relation,
                old: reader.tuple()?,
            }
        }
        b'T' => {
            let count = reader.u32()?;
            let _options = reader.u8()?;
            let relations = (0..count).map(|_| reader.u32()).collect::<Result<_, _>>()?;
            Message::Truncate { relations }
        }
        _ => Message::Other,
    })
}

/// Reads a payload front to back.
struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize) -> Result<(), DecodeError> {
        if self.0.remaining() < n {
            return Err(DecodeError("truncated".into()));
        }
        Ok(())
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        self.need(1)?;
        Ok(self.0.get_u8())
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        self.need(2)?;
        Ok(self.0.get_u16())
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.need(4)?;
        Ok(self.0.get_u32())
    }

    fn expect(&mut self, tag: u8) -> Result<(), DecodeError> {
        match self.u8()? {
            found if found == tag => Ok(()),
            found => Err(DecodeError(format!(
                "expected {:?}, found {found:#04x}",
                tag as char
            ))),
        }
    }

    /// A NUL-terminated string.
    fn string(&mut self) -> Result<String, DecodeError> {
        let end = self
            .0
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| DecodeError("unterminated string".into()))?;
        let text = self.0.split_to(end);
        self.0.advance(1);
        String::from_utf8(text.to_vec()).map_err(|e| DecodeError(e.to_string()))
    }

    fn tuple(&mut self) -> Result<Tuple, DecodeError> {
        let count = self.u16()?;
        (0..count)
            .map(|_| match self.u8()? {
                b'n' => Ok(Value::Null),
                b'u' => Ok(Value::Unchanged),
                b't' => {
                    let len = self.u32()? as usize;
                    self.need(len)?;
                    let text = self.0.split_to(len);
                    String::from_utf8(text.to_vec())
                        .map(Value::Text)
                        .map_err(|e| DecodeError(e.to_string()))
                }
                b'b' => Err(DecodeError("binary values were not asked for".into())),
                other => Err(DecodeError(format!("unknown value kind {other:#04x}"))),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    fn tuple(out: &mut Vec<u8>, values: &[Option<&str>]) {
        out.put_u16(values.len() as u16);
        for value in values {
            match value {
                None => out.put_u8(b'n'),
                Some("<unchanged>") => out.put_u8(b'u'),
                Some(text) => {
                    out.put_u8(b't');
                    out.put_u32(text.len() as u32);
                    out.put_slice(text.as_bytes());
                }
            }
        }
    }

    #[test]
    fn relations_and_row_changes_decode() {
        let mut relation = vec![b'R'];
        relation.put_u32(16384);
        relation.put_slice(b"public\0orders\0");
        relation.put_u8(b'd');
        relation.put_u16(2);
        for name in ["id", "note"] {
            relation.put_u8(1);
            relation.put_slice(name.as_bytes());
            relation.put_u8(0);
            relation.put_u32(23);
            relation.put_u32(u32::MAX);
        }
        assert_eq!(
            decode(&Bytes::from(relation)).unwrap(),
            Message::Relation(Relation {
                id: 16384,
                schema: "public".into(),
                name: "orders".into(),
                columns: vec!["id".into(), "note".into()],
            })
        );

        let mut update = vec![b'U'];
        update.put_u32(16384);
        update.put_u8(b'K');
        tuple(&mut update, &[Some("1"), None]);
        update.put_u8(b'N');
        tuple(&mut update, &[Some("2"), Some("<unchanged>")]);
        assert_eq!(
            decode(&Bytes::from(update)).unwrap(),
            Message::Update {
                relation: 16384,
                old: Some(vec![Value::Text("1".into()), Value::Null]),
                new: vec![Value::Text("2".into()), Value::Unchanged],
            }
        );

        let mut truncate = vec![b'T'];
        truncate.put_u32(2);
        truncate.put_u8(0);
        truncate.put_u32(1);
        truncate.put_u32(2);
        assert_eq!(
            decode(&Bytes::from(truncate)).unwrap(),
            Message::Truncate {
                relations: vec![1, 2]
            }
        );
    }

    #[test]
    fn truncated_messages_are_errors_not_panics() {
        let mut insert = vec![b'I'];
        insert.put_u32(1);
        insert.put_u8(b'N');
        insert.put_u16(1);
        insert.put_u8(b't');
        insert.put_u32(100);
        insert.put_slice(b"short");
        assert!(decode(&Bytes::from(insert.clone())).is_err());
        for cut in 0..insert.len() {
            let _ = decode(&Bytes::copy_from_slice(&insert[..cut]));
        }
    }
}
