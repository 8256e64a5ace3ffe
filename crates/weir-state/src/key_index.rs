//! [`KeyIndex`]: key tuples (one or more Arrow columns) interned as dense
//! `u32` ids, without a heap allocation per key.
//!
//! Aggregates number their groups with it, and joins and `KeyedRows` their
//! keys; each keeps what it needs per key in plain vectors indexed by the
//! id (state tables index rows with [`crate::row_index::RowIndex`], which
//! keeps no keys at all). It is the same idea as DataFusion's
//! `GroupValues`, which numbers the groups of a batch query, with what a
//! stream also needs: looking a key up without adding it, removing a key
//! (its id is reused), and reading the key values of any id back (an
//! aggregate's output and state rows).
//!
//! Keys are stored in one of three ways:
//!
//! - no key columns (a global aggregate): the one empty key, id 0;
//! - one integer-like column (integers, dates, times, timestamps,
//!   durations): the value as an `i64` in a vector; hashing and comparing
//!   a key is one machine word;
//! - anything else: the keys' `arrow-row` encodings laid end to end in one
//!   byte arena, compared with `memcmp`; removed keys leave garbage that is
//!   compacted once it outweighs the live keys.
//!
//! The hash table itself ([`hashbrown::HashTable`]) holds only ids.
//!
//! Memory per key: 5 bytes of hash table (at its load factor, about 6),
//! plus 8 bytes of value for integer keys, or the key's encoding plus 20
//! bytes for others.

use std::hash::BuildHasher;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, ArrowPrimitiveType, PrimitiveArray};
use datafusion::arrow::buffer::{NullBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, DurationMicrosecondType, DurationMillisecondType,
    DurationNanosecondType, DurationSecondType, Int16Type, Int32Type, Int64Type, Int8Type,
    Time32MillisecondType, Time32SecondType, Time64MicrosecondType, Time64NanosecondType, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use hashbrown::{DefaultHashBuilder, HashTable};

use crate::error::{StateError, StateResult};

/// A key's id in a [`KeyIndex`]: dense from 0, reused after removal.
pub type KeyId = u32;

/// The keys of one batch, prepared for lookups in a [`KeyIndex`]: encoded
/// once, hashed once.
#[derive(Debug)]
pub struct Probe {
    values: ProbeValues,
    hashes: Vec<u64>,
}

#[derive(Debug)]
enum ProbeValues {
    Unit(usize),
    Int {
        values: Vec<i64>,
        nulls: Option<NullBuffer>,
    },
    Encoded(Rows),
}

impl Probe {
    /// Number of keys.
    pub fn len(&self) -> usize {
        match &self.values {
            ProbeValues::Unit(n) => *n,
            _ => self.hashes.len(),
        }
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The hash of key `row` (stable for the index's lifetime only).
    pub fn hash(&self, row: usize) -> u64 {
        match &self.values {
            ProbeValues::Unit(_) => 0,
            _ => self.hashes[row],
        }
    }

    /// Key `row`'s `arrow-row` encoding, for a probe of an index made by
    /// [`KeyIndex::ordered`] (empty for others).
    pub fn encoded(&self, row: usize) -> &[u8] {
        match &self.values {
            ProbeValues::Encoded(rows) => rows.row(row).data(),
            _ => &[],
        }
    }
}

#[derive(Debug)]
enum Store {
    /// No key columns: only the empty key, always id 0.
    Unit { present: bool },
    /// One integer-like column.
    Int {
        data_type: DataType,
        values: Vec<i64>,
        null_id: Option<KeyId>,
    },
    /// Encoded keys in an arena.
    Encoded {
        converter: RowConverter,
        arena: Vec<u8>,
        /// Per id: start in the arena, length, hash.
        spans: Vec<(usize, u32, u64)>,
        /// Bytes of removed keys still in the arena.
        garbage: usize,
    },
}

/// Interns key tuples as dense ids (see the module documentation).
#[derive(Debug)]
pub struct KeyIndex {
    store: Store,
    table: HashTable<KeyId>,
    hasher: DefaultHashBuilder,
    /// Ids free for reuse.
    free: Vec<KeyId>,
    /// Ids handed out so far, live or free: every id is below it.
    slots: usize,
}

/// Arenas smaller than this are never compacted.
const MIN_COMPACT_BYTES: usize = 1 << 20;

impl KeyIndex {
    /// An empty index of keys with columns of `types`.
    pub fn new(types: &[DataType]) -> StateResult<Self> {
        let store = match types {
            [] => Store::Unit { present: false },
            [one] if int_like(one) => Store::Int {
                data_type: one.clone(),
                values: Vec::new(),
                null_id: None,
            },
            _ => return Self::ordered(types.iter().map(|t| SortField::new(t.clone())).collect()),
        };
        Ok(Self::with_store(store))
    }

    fn with_store(store: Store) -> Self {
        KeyIndex {
            store,
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            free: Vec::new(),
            slots: 0,
        }
    }

    /// An empty index of keys encoded by `fields` (with their sort
    /// options), always as `arrow-row` encodings: comparing two keys'
    /// encodings ([`KeyIndex::encoded`], [`Probe::encoded`]) compares the
    /// keys in the fields' order.
    pub fn ordered(fields: Vec<SortField>) -> StateResult<Self> {
        Ok(Self::with_store(Store::Encoded {
            converter: RowConverter::new(fields)?,
            arena: Vec::new(),
            spans: Vec::new(),
            garbage: 0,
        }))
    }

    /// The encoding of held key `id`, for an index made by
    /// [`KeyIndex::ordered`] (empty for others).
    pub fn encoded(&self, id: KeyId) -> &[u8] {
        match &self.store {
            Store::Encoded { arena, spans, .. } => {
                let (start, len, _) = spans[id as usize];
                &arena[start..start + len as usize]
            }
            _ => &[],
        }
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.slots - self.free.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One more than the largest id handed out: vectors indexed by id need
    /// this many entries.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Bytes this index holds allocated (hash table, values, arena).
    pub fn memory_size(&self) -> usize {
        let store = match &self.store {
            Store::Unit { .. } => 0,
            Store::Int { values, .. } => values.capacity() * 8,
            Store::Encoded {
                converter,
                arena,
                spans,
                ..
            } => arena.capacity() + spans.capacity() * 24 + converter.size(),
        };
        store + self.table.allocation_size() + self.free.capacity() * 4
    }

    /// Encodes and hashes the keys of a batch of `rows` rows (`columns` in
    /// key order; none for an index without key columns).
    pub fn prepare(&self, columns: &[ArrayRef], rows: usize) -> StateResult<Probe> {
        let values = match &self.store {
            Store::Unit { .. } => {
                return Ok(Probe {
                    values: ProbeValues::Unit(rows),
                    hashes: Vec::new(),
                });
            }
            Store::Int { data_type, .. } => {
                let column = single(columns)?;
                if column.data_type() != data_type {
                    return Err(StateError::Internal(format!(
                        "key of type {} probed with {}",
                        data_type,
                        column.data_type()
                    )));
                }
                ProbeValues::Int {
                    values: int_values(column.as_ref())?,
                    nulls: column.logical_nulls(),
                }
            }
            Store::Encoded { converter, .. } => {
                ProbeValues::Encoded(converter.convert_columns(columns)?)
            }
        };
        let hashes = match &values {
            ProbeValues::Unit(_) => Vec::new(),
            ProbeValues::Int { values, nulls } => values
                .iter()
                .enumerate()
                .map(|(i, v)| match nulls {
                    Some(n) if n.is_null(i) => NULL_HASH,
                    _ => self.hasher.hash_one(v),
                })
                .collect(),
            ProbeValues::Encoded(rows) => rows
                .iter()
                .map(|r| self.hasher.hash_one(r.as_ref()))
                .collect(),
        };
        Ok(Probe { values, hashes })
    }

    /// The id of key `row` of `probe`, if held.
    pub fn find(&self, probe: &Probe, row: usize) -> Option<KeyId> {
        match (&self.store, &probe.values) {
            (Store::Unit { present }, _) => present.then_some(0),
            (
                Store::Int {
                    values, null_id, ..
                },
                ProbeValues::Int { values: p, nulls },
            ) => {
                if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                    return *null_id;
                }
                let value = p[row];
                self.table
                    .find(probe.hashes[row], |&id| values[id as usize] == value)
                    .copied()
            }
            (Store::Encoded { arena, spans, .. }, ProbeValues::Encoded(rows)) => {
                let key = rows.row(row);
                let key = key.as_ref();
                self.table
                    .find(probe.hashes[row], |&id| {
                        let (start, len, _) = spans[id as usize];
                        &arena[start..start + len as usize] == key
                    })
                    .copied()
            }
            _ => None,
        }
    }

    /// The id of key `row` of `probe`, added if absent; and whether it was
    /// added.
    pub fn intern(&mut self, probe: &Probe, row: usize) -> (KeyId, bool) {
        if let Some(id) = self.find(probe, row) {
            return (id, false);
        }
        let id = self.next_id();
        let hash = probe.hash(row);
        match (&mut self.store, &probe.values) {
            (Store::Unit { present }, _) => {
                *present = true;
                return (id, true);
            }
            (
                Store::Int {
                    values, null_id, ..
                },
                ProbeValues::Int { values: p, nulls },
            ) => {
                grow(values, id, 0);
                if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                    *null_id = Some(id);
                    return (id, true);
                }
                values[id as usize] = p[row];
            }
            (Store::Encoded { arena, spans, .. }, ProbeValues::Encoded(rows)) => {
                let key = rows.row(row);
                let key = key.as_ref();
                grow(spans, id, (0, 0, 0));
                spans[id as usize] = (arena.len(), key.len() as u32, hash);
                arena.extend_from_slice(key);
            }
            _ => unreachable!("probes are prepared by the index they probe"),
        }
        let hasher = &self.hasher;
        let store = &self.store;
        self.table
            .insert_unique(hash, id, |&other| rehash(store, hasher, other));
        (id, true)
    }

    fn next_id(&mut self) -> KeyId {
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots += 1;
                (self.slots - 1) as KeyId
            }
        }
    }

    /// The ids of every key of `columns`, `None` where absent.
    pub fn find_all(&self, columns: &[ArrayRef], rows: usize) -> StateResult<Vec<Option<KeyId>>> {
        let probe = self.prepare(columns, rows)?;
        Ok((0..probe.len()).map(|row| self.find(&probe, row)).collect())
    }

    /// The ids of every key of `probe`, adding absent ones, into `ids`.
    /// Returns how many keys were added.
    pub fn intern_all(&mut self, probe: &Probe, ids: &mut Vec<KeyId>) -> usize {
        ids.clear();
        ids.reserve(probe.len());
        let mut added = 0;
        for row in 0..probe.len() {
            let (id, new) = self.intern(probe, row);
            added += usize::from(new);
            ids.push(id);
        }
        added
    }

    /// Removes the key with id `id` (which must be held); the id may be
    /// handed out again.
    pub fn remove(&mut self, id: KeyId) {
        let hash = rehash(&self.store, &self.hasher, id);
        match &mut self.store {
            Store::Unit { present } => {
                *present = false;
                self.free.push(id);
                return;
            }
            Store::Int { null_id, .. } if *null_id == Some(id) => {
                *null_id = None;
                self.free.push(id);
                return;
            }
            Store::Int { .. } => {}
            Store::Encoded { spans, garbage, .. } => {
                *garbage += spans[id as usize].1 as usize;
            }
        }
        if let Ok(entry) = self.table.find_entry(hash, |&other| other == id) {
            entry.remove();
        }
        self.free.push(id);
        self.compact_arena();
    }

    /// Rewrites the arena without removed keys once they outweigh the live
    /// ones.
    fn compact_arena(&mut self) {
        let Store::Encoded {
            arena,
            spans,
            garbage,
            ..
        } = &mut self.store
        else {
            return;
        };
        if *garbage < MIN_COMPACT_BYTES || *garbage * 2 < arena.len() {
            return;
        }
        let mut free = vec![false; spans.len()];
        for &id in &self.free {
            free[id as usize] = true;
        }
        let mut compacted = Vec::with_capacity(arena.len() - *garbage);
        for (id, span) in spans.iter_mut().enumerate() {
            if free[id] {
                *span = (0, 0, span.2);
                continue;
            }
            let (start, len, _) = *span;
            span.0 = compacted.len();
            compacted.extend_from_slice(&arena[start..start + len as usize]);
        }
        *arena = compacted;
        *garbage = 0;
    }

    /// The key columns of `ids` (each must be held), in order.
    pub fn decode(&self, ids: &[KeyId]) -> StateResult<Vec<ArrayRef>> {
        match &self.store {
            Store::Unit { .. } => Ok(Vec::new()),
            Store::Int {
                data_type,
                values,
                null_id,
            } => {
                let nulls = null_id.map(|null| {
                    NullBuffer::from(ids.iter().map(|&id| id != null).collect::<Vec<bool>>())
                });
                let raw: Vec<i64> = ids
                    .iter()
                    .map(|&id| values.get(id as usize).copied().unwrap_or(0))
                    .collect();
                Ok(vec![from_int_values(data_type, raw, nulls)?])
            }
            Store::Encoded {
                converter,
                arena,
                spans,
                ..
            } => {
                let parser = converter.parser();
                let rows = ids.iter().map(|&id| {
                    let (start, len, _) = spans[id as usize];
                    parser.parse(&arena[start..start + len as usize])
                });
                Ok(converter.convert_rows(rows)?)
            }
        }
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        self.table.clear();
        self.free.clear();
        self.slots = 0;
        match &mut self.store {
            Store::Unit { present } => *present = false,
            Store::Int {
                values, null_id, ..
            } => {
                values.clear();
                *null_id = None;
            }
            Store::Encoded {
                arena,
                spans,
                garbage,
                ..
            } => {
                arena.clear();
                spans.clear();
                *garbage = 0;
            }
        }
    }
}

/// The hash NULL keys of an integer index get (they are kept apart from
/// the hash table, so any value does).
const NULL_HASH: u64 = 0;

fn rehash(store: &Store, hasher: &DefaultHashBuilder, id: KeyId) -> u64 {
    match store {
        Store::Unit { .. } => 0,
        Store::Int { values, .. } => hasher.hash_one(values[id as usize]),
        Store::Encoded { spans, .. } => spans[id as usize].2,
    }
}

fn grow<T: Clone>(vec: &mut Vec<T>, id: KeyId, fill: T) {
    if vec.len() <= id as usize {
        vec.resize(id as usize + 1, fill);
    }
}

fn single(columns: &[ArrayRef]) -> StateResult<&ArrayRef> {
    match columns {
        [one] => Ok(one),
        _ => Err(StateError::Internal(format!(
            "a one-column key probed with {} columns",
            columns.len()
        ))),
    }
}

/// Whether keys of `data_type` are kept as `i64` values.
fn int_like(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Date32
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Timestamp(_, _)
            | DataType::Duration(_)
    )
}

/// An integer type's values to and from the `i64` keys stand for them
/// (`u64` by its bit pattern, so every value is kept exactly).
trait IntNative: Copy {
    fn to_key(self) -> i64;
    fn from_key(key: i64) -> Self;
}

macro_rules! int_native {
    ($($t:ty),*) => {$(
        impl IntNative for $t {
            fn to_key(self) -> i64 {
                self as i64
            }
            fn from_key(key: i64) -> Self {
                key as $t
            }
        }
    )*};
}
int_native!(i8, i16, i32, i64, u8, u16, u32, u64);

fn values_of<T>(array: &dyn Array) -> Vec<i64>
where
    T: ArrowPrimitiveType,
    T::Native: IntNative,
{
    let array = array
        .as_any()
        .downcast_ref::<PrimitiveArray<T>>()
        .expect("the type was matched");
    array.values().iter().map(|v| v.to_key()).collect()
}

fn array_of<T>(
    values: Vec<i64>,
    nulls: Option<NullBuffer>,
    data_type: &DataType,
) -> StateResult<ArrayRef>
where
    T: ArrowPrimitiveType,
    T::Native: IntNative,
{
    let values: ScalarBuffer<T::Native> = values.into_iter().map(T::Native::from_key).collect();
    let array = PrimitiveArray::<T>::try_new(values, nulls)?.with_data_type(data_type.clone());
    Ok(Arc::new(array))
}

/// Dispatches on an integer-like type to a function generic over its
/// Arrow type.
macro_rules! dispatch_int {
    ($data_type:expr, $f:ident, $($arg:expr),*) => {
        match $data_type {
            DataType::Int8 => $f::<Int8Type>($($arg),*),
            DataType::Int16 => $f::<Int16Type>($($arg),*),
            DataType::Int32 => $f::<Int32Type>($($arg),*),
            DataType::Int64 => $f::<Int64Type>($($arg),*),
            DataType::UInt8 => $f::<UInt8Type>($($arg),*),
            DataType::UInt16 => $f::<UInt16Type>($($arg),*),
            DataType::UInt32 => $f::<UInt32Type>($($arg),*),
            DataType::UInt64 => $f::<UInt64Type>($($arg),*),
            DataType::Date32 => $f::<Date32Type>($($arg),*),
            DataType::Date64 => $f::<Date64Type>($($arg),*),
            DataType::Time32(TimeUnit::Second) => $f::<Time32SecondType>($($arg),*),
            DataType::Time32(_) => $f::<Time32MillisecondType>($($arg),*),
            DataType::Time64(TimeUnit::Microsecond) => $f::<Time64MicrosecondType>($($arg),*),
            DataType::Time64(_) => $f::<Time64NanosecondType>($($arg),*),
            DataType::Timestamp(TimeUnit::Second, _) => $f::<TimestampSecondType>($($arg),*),
            DataType::Timestamp(TimeUnit::Millisecond, _) => $f::<TimestampMillisecondType>($($arg),*),
            DataType::Timestamp(TimeUnit::Microsecond, _) => $f::<TimestampMicrosecondType>($($arg),*),
            DataType::Timestamp(TimeUnit::Nanosecond, _) => $f::<TimestampNanosecondType>($($arg),*),
            DataType::Duration(TimeUnit::Second) => $f::<DurationSecondType>($($arg),*),
            DataType::Duration(TimeUnit::Millisecond) => $f::<DurationMillisecondType>($($arg),*),
            DataType::Duration(TimeUnit::Microsecond) => $f::<DurationMicrosecondType>($($arg),*),
            DataType::Duration(TimeUnit::Nanosecond) => $f::<DurationNanosecondType>($($arg),*),
            other => unreachable!("{other} is not an integer-like key type"),
        }
    };
}

fn int_values(array: &dyn Array) -> StateResult<Vec<i64>> {
    Ok(dispatch_int!(array.data_type(), values_of, array))
}

fn from_int_values(
    data_type: &DataType,
    values: Vec<i64>,
    nulls: Option<NullBuffer>,
) -> StateResult<ArrayRef> {
    dispatch_int!(data_type, array_of, values, nulls, data_type)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int32Array, StringArray, TimestampMicrosecondArray};

    fn ints(values: &[Option<i32>]) -> Vec<ArrayRef> {
        vec![Arc::new(Int32Array::from(values.to_vec()))]
    }

    #[test]
    fn integer_keys_are_interned_found_removed_and_reused() {
        let mut index = KeyIndex::new(&[DataType::Int32]).unwrap();
        let probe = index
            .prepare(&ints(&[Some(7), None, Some(7), Some(-3)]), 4)
            .unwrap();
        let mut ids = Vec::new();
        assert_eq!(index.intern_all(&probe, &mut ids), 3);
        assert_eq!(ids, vec![0, 1, 0, 2]);
        assert_eq!(index.len(), 3);
        let decoded = index.decode(&[2, 1, 0]).unwrap();
        let column = decoded[0].as_primitive::<Int32Type>();
        assert_eq!(
            column.iter().collect::<Vec<_>>(),
            vec![Some(-3), None, Some(7)]
        );

        index.remove(0);
        assert_eq!(
            index.find_all(&ints(&[Some(7), None]), 2).unwrap(),
            vec![None, Some(1)]
        );
        let probe = index.prepare(&ints(&[Some(11)]), 1).unwrap();
        assert_eq!(index.intern(&probe, 0), (0, true), "the freed id is reused");
        index.remove(1);
        assert_eq!(index.find_all(&ints(&[None]), 1).unwrap(), vec![None]);
    }

    #[test]
    fn other_keys_are_encoded_and_decode_back_with_their_types() {
        let types = [
            DataType::Utf8,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ];
        let mut index = KeyIndex::new(&types).unwrap();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![
                Some("a"),
                Some("b"),
                None,
                Some("a"),
            ])),
            Arc::new(TimestampMicrosecondArray::from(vec![1, 2, 3, 1]).with_timezone("UTC")),
        ];
        let probe = index.prepare(&columns, 4).unwrap();
        let mut ids = Vec::new();
        index.intern_all(&probe, &mut ids);
        assert_eq!(ids, vec![0, 1, 2, 0]);
        let decoded = index.decode(&[2, 0]).unwrap();
        assert_eq!(decoded[1].data_type(), &types[1]);
        assert_eq!(
            decoded[0].as_string::<i32>().iter().collect::<Vec<_>>(),
            vec![None, Some("a")]
        );
        index.remove(1);
        assert_eq!(
            index.find_all(&columns, 4).unwrap(),
            vec![Some(0), None, Some(2), Some(0)]
        );
    }

    #[test]
    fn the_arena_is_compacted_once_removed_keys_outweigh_live_ones() {
        let mut index = KeyIndex::new(&[DataType::Utf8, DataType::Utf8]).unwrap();
        let long = "x".repeat(1000);
        let keys: Vec<String> = (0..4000).map(|i| format!("{long}{i}")).collect();
        let column: ArrayRef = Arc::new(StringArray::from(keys.clone()));
        let columns = vec![column.clone(), column];
        let probe = index.prepare(&columns, keys.len()).unwrap();
        let mut ids = Vec::new();
        index.intern_all(&probe, &mut ids);
        let before = index.memory_size();
        for &id in &ids[..3000] {
            index.remove(id);
        }
        let Store::Encoded { arena, .. } = &index.store else {
            panic!("encoded keys")
        };
        assert!(
            arena.len() < 1100 * 2 * 1000,
            "arena holds about the live keys"
        );
        assert!(index.memory_size() <= before);
        let found = index.find_all(&columns, keys.len()).unwrap();
        assert!(found[..3000].iter().all(Option::is_none));
        assert_eq!(found[3000..].iter().flatten().count(), 1000);
        let decoded = index.decode(&[ids[3999]]).unwrap();
        assert_eq!(decoded[0].as_string::<i32>().value(0), keys[3999]);
    }

    #[test]
    fn a_key_without_columns_is_one_key() {
        let mut index = KeyIndex::new(&[]).unwrap();
        let probe = index.prepare(&[], 3).unwrap();
        assert_eq!(index.find(&probe, 0), None);
        let mut ids = Vec::new();
        assert_eq!(index.intern_all(&probe, &mut ids), 1);
        assert_eq!(ids, vec![0, 0, 0]);
        index.remove(0);
        assert!(index.is_empty());
    }

    #[test]
    fn an_ordered_index_compares_encodings_in_its_fields_order() {
        use datafusion::arrow::compute::SortOptions;
        // One int column, descending with NULLs last: an ordered index
        // encodes even a single integer column.
        let descending = SortOptions::new(true, false);
        let mut index = KeyIndex::ordered(vec![SortField::new_with_options(
            DataType::Int32,
            descending,
        )])
        .unwrap();
        let column: ArrayRef = Arc::new(Int32Array::from(vec![Some(3), None, Some(7)]));
        let probe = index.prepare(&[column], 3).unwrap();
        let mut ids = Vec::new();
        index.intern_all(&probe, &mut ids);
        let (three, null, seven) = (ids[0], ids[1], ids[2]);
        assert!(index.encoded(seven) < index.encoded(three));
        assert!(index.encoded(three) < index.encoded(null));
        assert_eq!(probe.encoded(0), index.encoded(three));
        let decoded = index.decode(&[seven, null]).unwrap();
        assert_eq!(
            decoded[0].as_primitive::<datafusion::arrow::datatypes::Int32Type>(),
            &Int32Array::from(vec![Some(7), None])
        );
    }
}
