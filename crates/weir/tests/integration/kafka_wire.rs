//! A topic's records as Kafka transactions left them, read over the Kafka
//! protocol itself (Fetch v4, read uncommitted): each record batch with
//! its producer id, epoch and transactional flag, and the control batches
//! (commit and abort markers) that no client library hands to its user.
//! The tests apply the markers themselves, as a `read_committed` consumer
//! of Apache Kafka does with the aborted transactions its broker names:
//! nisshi 0.7 names none (its fetch answers an empty list), so its
//! `read_committed` consumers also see aborted transactions' records.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The producer session that wrote a record: producer id and epoch. A
/// transaction a crash cut short is the last of its session (the next
/// producer with the same transactional id fences it), so an aborted
/// transaction is named by its session. (A marker ends the open
/// transaction of its producer id whatever its epoch: Apache Kafka
/// writes a fencing abort with the bumped epoch, nisshi with the old.)
pub type Session = (i64, i16);

/// One data record.
#[derive(Debug, Clone)]
pub struct Record {
    pub key: Option<String>,
    pub value: Option<String>,
    pub session: Session,
}

/// A topic's data records by how their transactions ended, partition by
/// partition in offset order.
#[derive(Debug, Default)]
pub struct Outcomes {
    /// Records outside transactions and those of committed transactions:
    /// what a `read_committed` consumer of Apache Kafka reads.
    pub committed: Vec<Record>,
    /// Records of transactions that ended with an abort marker.
    pub aborted: Vec<Record>,
    /// Records of transactions without a marker yet.
    pub open: Vec<Record>,
}

/// A record's key and value as the batch holds them.
type RawRecord = (Option<Vec<u8>>, Option<Vec<u8>>);

struct Batch {
    producer: Session,
    transactional: bool,
    /// For a control batch: whether its marker commits (else aborts).
    marker: Option<bool>,
    records: Vec<RawRecord>,
}

/// Every record of `topic` (partitions `0..partitions`) on the broker at
/// `address`, sorted by how its transaction ended.
pub fn outcomes(address: &str, topic: &str, partitions: i32) -> Outcomes {
    let mut stream = TcpStream::connect(address).expect("connect to the broker");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut outcomes = Outcomes::default();
    for partition in 0..partitions {
        let mut pending: HashMap<i64, Vec<Record>> = HashMap::new();
        let (mut offset, mut empty_fetches) = (0, 0);
        loop {
            let (batches, next, high_watermark) = fetch(&mut stream, topic, partition, offset);
            if next == offset && offset < high_watermark {
                empty_fetches += 1;
                assert!(
                    empty_fetches < 50,
                    "{topic}/{partition}: nothing at {offset} below {high_watermark}"
                );
            }
            for batch in batches {
                let records = batch.records.into_iter().map(|(key, value)| Record {
                    key: key.map(text),
                    value: value.map(text),
                    session: batch.producer,
                });
                match batch.marker {
                    Some(commit) => {
                        let ended = pending.remove(&batch.producer.0).unwrap_or_default();
                        if commit {
                            outcomes.committed.extend(ended);
                        } else {
                            outcomes.aborted.extend(ended);
                        }
                    }
                    None if batch.transactional => {
                        pending.entry(batch.producer.0).or_default().extend(records)
                    }
                    None => outcomes.committed.extend(records),
                }
            }
            offset = next;
            if offset >= high_watermark {
                break;
            }
        }
        outcomes.open.extend(pending.into_values().flatten());
    }
    outcomes
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

/// One Fetch of `partition` from `offset`: its whole batches, the offset
/// after the last, and the partition's high watermark.
fn fetch(
    stream: &mut TcpStream,
    topic: &str,
    partition: i32,
    offset: i64,
) -> (Vec<Batch>, i64, i64) {
    const MAX_BYTES: i32 = 8 << 20;
    let mut request = Vec::new();
    request.extend(1i16.to_be_bytes()); // Fetch
    request.extend(4i16.to_be_bytes()); // version 4
    request.extend(1i32.to_be_bytes()); // correlation id
    put_string(&mut request, "weir-tests");
    request.extend((-1i32).to_be_bytes()); // replica id: a consumer
    request.extend(500i32.to_be_bytes()); // max wait (ms)
    request.extend(1i32.to_be_bytes()); // min bytes
    request.extend(MAX_BYTES.to_be_bytes());
    request.push(0); // read uncommitted: every record, and the markers
    request.extend(1i32.to_be_bytes());
    put_string(&mut request, topic);
    request.extend(1i32.to_be_bytes());
    request.extend(partition.to_be_bytes());
    request.extend(offset.to_be_bytes());
    request.extend(MAX_BYTES.to_be_bytes());
    stream
        .write_all(&(request.len() as i32).to_be_bytes())
        .unwrap();
    stream.write_all(&request).unwrap();

    let mut length = [0u8; 4];
    stream.read_exact(&mut length).unwrap();
    let mut response = vec![0u8; i32::from_be_bytes(length) as usize];
    stream.read_exact(&mut response).unwrap();
    let mut r = Reader(&response);
    r.i32(); // correlation id
    r.i32(); // throttle time
    assert_eq!(r.i32(), 1, "one topic in the answer");
    r.string();
    assert_eq!(r.i32(), 1, "one partition in the answer");
    r.i32();
    let error = r.i16();
    assert_eq!(
        error, 0,
        "fetch of {topic}/{partition} at {offset}: error {error}"
    );
    let high_watermark = r.i64();
    r.i64(); // last stable offset
    let aborted = r.i32();
    for _ in 0..aborted.max(0) {
        r.i64();
        r.i64();
    }
    let size = r.i32();
    let records = if size > 0 { r.take(size as usize) } else { &[] };
    let (batches, next) = batches(records, offset);
    (batches, next, high_watermark)
}

/// The whole record batches (v2) in `bytes` and the offset after the
/// last (`from` if there is none).
fn batches(mut bytes: &[u8], from: i64) -> (Vec<Batch>, i64) {
    let mut batches = Vec::new();
    let mut next = from;
    while bytes.len() >= 12 {
        let mut head = Reader(bytes);
        let base_offset = head.i64();
        let length = head.i32() as usize;
        if bytes.len() < 12 + length {
            break; // cut off by the fetch's size limit: fetched again
        }
        let mut r = Reader(&bytes[12..12 + length]);
        bytes = &bytes[12 + length..];
        r.i32(); // partition leader epoch
        assert_eq!(r.take(1)[0], 2, "record batch format v2");
        r.i32(); // crc
        let attributes = r.i16();
        assert_eq!(attributes & 7, 0, "uncompressed batches");
        let last_offset_delta = r.i32();
        r.i64(); // first timestamp
        r.i64(); // max timestamp
        let producer = (r.i64(), r.i16());
        r.i32(); // first sequence
        let count = r.i32();
        let mut records = Vec::new();
        for _ in 0..count {
            let length = r.varint() as usize;
            let mut record = Reader(r.take(length));
            record.take(1); // attributes
            record.varint(); // timestamp delta
            record.varint(); // offset delta
            let key = record.bytes();
            let value = record.bytes();
            records.push((key, value));
        }
        let control = attributes & 0x20 != 0;
        let marker = control.then(|| {
            let key = records[0].0.as_deref().expect("a control record's key");
            // version (int16), then the type: 0 abort, 1 commit
            i16::from_be_bytes([key[2], key[3]]) == 1
        });
        batches.push(Batch {
            producer,
            transactional: attributes & 0x10 != 0,
            marker,
            records: if control { Vec::new() } else { records },
        });
        next = base_offset + i64::from(last_offset_delta) + 1;
    }
    (batches, next)
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as i16).to_be_bytes());
    out.extend(s.as_bytes());
}

/// Big-endian fields and zigzag varints, front to back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }

    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take(2).try_into().unwrap())
    }

    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take(4).try_into().unwrap())
    }

    fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take(8).try_into().unwrap())
    }

    fn string(&mut self) -> String {
        let length = self.i16().max(0) as usize;
        text(self.take(length).to_vec())
    }

    fn varint(&mut self) -> i64 {
        let (mut value, mut shift) = (0u64, 0);
        loop {
            let byte = self.take(1)[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        (value >> 1) as i64 ^ -((value & 1) as i64)
    }

    /// A varint length and that many bytes; -1 is null.
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let length = self.varint();
        (length >= 0).then(|| self.take(length as usize).to_vec())
    }
}
