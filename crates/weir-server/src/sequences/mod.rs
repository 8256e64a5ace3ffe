//! Sequences: `CREATE SEQUENCE`, `SERIAL` and identity columns, and
//! `nextval`.
//!
//! A sequence's definition (type, bounds, increment) is in the catalog,
//! created and dropped with the DDL like a table's. Its value is not: as
//! in PostgreSQL, `nextval` is not transactional (a rolled-back block does
//! not give its numbers back) and concurrent sessions never wait for each
//! other's blocks. The values live in [`Sequences`], beside the working
//! state, and each epoch's cut records them with the epoch (in the
//! manifest's positions, [`position_key`]), so a committed row never holds
//! a number that a restarted server hands out again: the row was written
//! after its number was taken, so the cut of the row's epoch saw the
//! sequence at or past it. Outside a transaction block a statement's rows
//! are held back until the epoch holding the numbers it took is committed
//! (`functions.rs`), so a number a client has seen is never handed out
//! again either, even by a `SELECT nextval` that wrote nothing; inside a
//! block, the block's commit waits for them.
//!
//! One file per concern: this one the definitions and the values, `ddl.rs`
//! the statements and `SERIAL`/identity columns, `functions.rs` `nextval`,
//! `currval`, `setval`, `lastval` and `pg_get_serial_sequence`.

pub mod ddl;
pub mod functions;
mod options;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use serde::{Deserialize, Serialize};
use weir_state::TableId;

use crate::error::{SqlState, WeirError, WeirResult};

/// A sequence in the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SequenceDef {
    /// Stable id, from the same counter as tables': its values are kept
    /// under it.
    pub id: TableId,
    /// Its name.
    pub name: String,
    /// Type, bounds, increment, start.
    pub options: SequenceOptions,
    /// The table and column it numbers (`SERIAL`, identity columns): it is
    /// dropped with that table.
    pub owned_by: Option<(String, String)>,
}

/// How a sequence counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceOptions {
    /// `pg_type` OID of its values: `int2`, `int4` or `int8`.
    pub type_oid: u32,
    /// `START WITH`.
    pub start: i64,
    /// `INCREMENT BY` (never zero).
    pub increment: i64,
    /// `MINVALUE`.
    pub min: i64,
    /// `MAXVALUE`.
    pub max: i64,
    /// `CYCLE`: past a bound, start again from the other.
    pub cycle: bool,
}

impl SequenceOptions {
    /// A sequence of `type_oid` values counting up by one from 1.
    pub fn ascending(type_oid: u32) -> Self {
        SequenceOptions {
            type_oid,
            start: 1,
            increment: 1,
            min: 1,
            max: type_max(type_oid),
            cycle: false,
        }
    }
}

/// The largest value of integer type `type_oid`.
pub fn type_max(type_oid: u32) -> i64 {
    match type_oid {
        21 => i16::MAX.into(),
        23 => i32::MAX.into(),
        _ => i64::MAX,
    }
}

/// The smallest value of integer type `type_oid`.
pub fn type_min(type_oid: u32) -> i64 {
    match type_oid {
        21 => i16::MIN.into(),
        23 => i32::MIN.into(),
        _ => i64::MIN,
    }
}

/// Where a sequence stands: its last value, and whether `nextval` has
/// returned it (false after `CREATE` or `setval(s, v, false)`: the next
/// `nextval` returns `last` itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceValue {
    /// The last value.
    pub last: i64,
    /// Whether it was handed out.
    pub called: bool,
}

impl SequenceValue {
    /// A new sequence's value.
    pub fn start(options: &SequenceOptions) -> Self {
        SequenceValue {
            last: options.start,
            called: false,
        }
    }

    /// The value as a manifest position (see [`position_key`]).
    pub fn to_position(self) -> Vec<u64> {
        vec![self.last as u64, u64::from(self.called)]
    }

    /// The value a manifest position holds.
    pub fn from_position(position: &[u64]) -> Option<Self> {
        match position {
            [last, called] => Some(SequenceValue {
                last: *last as i64,
                called: *called != 0,
            }),
            _ => None,
        }
    }
}

/// What the keys of sequences' values among a manifest's positions
/// start with.
pub const POSITION_PREFIX: &str = "sequence/";

/// The key of a sequence's value among a manifest's positions.
pub fn position_key(id: TableId) -> String {
    format!("{POSITION_PREFIX}{id}")
}

/// A sequence's state in memory.
#[derive(Debug, Clone, Copy)]
struct Entry {
    options: SequenceOptions,
    value: SequenceValue,
}

/// The values of every sequence, shared by all sessions (see the module
/// documentation).
#[derive(Debug)]
pub struct Sequences {
    state: Mutex<State>,
    /// A value changed since the last cut: the open epoch has work.
    moved: AtomicBool,
}

#[derive(Debug)]
struct State {
    entries: HashMap<TableId, Entry>,
    /// The epoch whose cut will record the values as they are now.
    open_epoch: u64,
}

impl Sequences {
    /// No sequences; the open epoch is `open_epoch`.
    pub fn new(open_epoch: u64) -> Self {
        Sequences {
            state: Mutex::new(State {
                entries: HashMap::new(),
                open_epoch,
            }),
            moved: AtomicBool::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("sequences lock")
    }

    /// Adds sequence `id` standing at `value` (a new one, whose catalog
    /// change commits it, or one recovered from a manifest).
    pub fn insert(&self, id: TableId, options: SequenceOptions, value: SequenceValue) {
        self.state().entries.insert(id, Entry { options, value });
    }

    /// Forgets sequence `id` (dropped, or created by a block that did not
    /// commit).
    pub fn forget(&self, id: TableId) {
        self.state().entries.remove(&id);
    }

    /// Hands out the next `n` values of sequence `def`, all or none.
    /// Returns them with the epoch whose commit makes them durable.
    pub fn next(&self, def: &SequenceDef, n: usize) -> WeirResult<(Vec<i64>, u64)> {
        let mut state = self.state();
        let epoch = state.open_epoch;
        let entry = state.entries.get_mut(&def.id).ok_or_else(|| dropped(def))?;
        let mut value = entry.value;
        let values = advance(&entry.options, &mut value, n, &def.name)?;
        entry.value = value;
        drop(state);
        if n > 0 {
            self.moved.store(true, Ordering::SeqCst);
        }
        Ok((values, epoch))
    }

    /// `setval`: sets sequence `def`'s value. Returns the epoch whose
    /// commit makes it durable.
    pub fn set(&self, def: &SequenceDef, value: SequenceValue) -> WeirResult<u64> {
        let mut state = self.state();
        let epoch = state.open_epoch;
        let entry = state.entries.get_mut(&def.id).ok_or_else(|| dropped(def))?;
        let SequenceOptions { min, max, .. } = entry.options;
        if !(min..=max).contains(&value.last) {
            return Err(WeirError::new(
                SqlState::NUMERIC_OUT_OF_RANGE,
                format!(
                    "setval: value {} is out of bounds for sequence \"{}\" ({min}..{max})",
                    value.last, def.name
                ),
            ));
        }
        entry.value = value;
        drop(state);
        self.moved.store(true, Ordering::SeqCst);
        Ok(epoch)
    }

    /// `ALTER SEQUENCE`: sequence `id` counts by `options` from now on;
    /// with `restart`, its next value is that one. Returns the epoch that
    /// makes the change durable.
    pub fn alter(&self, id: TableId, options: SequenceOptions, restart: Option<i64>) -> u64 {
        let mut state = self.state();
        let epoch = state.open_epoch;
        if let Some(entry) = state.entries.get_mut(&id) {
            entry.options = options;
            if let Some(last) = restart {
                entry.value = SequenceValue {
                    last,
                    called: false,
                };
            }
        }
        drop(state);
        self.moved.store(true, Ordering::SeqCst);
        epoch
    }

    /// Starts sequence `def` again from its first value (`TRUNCATE ...
    /// RESTART IDENTITY`); returns the epoch that makes it durable.
    pub fn restart(&self, def: &SequenceDef) -> WeirResult<u64> {
        self.set(def, SequenceValue::start(&def.options))
    }

    /// Sequence `def` read as a relation (`SELECT * FROM s`), as
    /// PostgreSQL shows it: one row of `last_value`, `log_cnt` (always 0:
    /// nothing is logged ahead) and `is_called`.
    pub fn relation(&self, def: &SequenceDef) -> WeirResult<RecordBatch> {
        let value = self
            .state()
            .entries
            .get(&def.id)
            .map(|e| e.value)
            .ok_or_else(|| dropped(def))?;
        let schema = Arc::new(Schema::new(vec![
            Field::new("last_value", DataType::Int64, false),
            Field::new("log_cnt", DataType::Int64, false),
            Field::new("is_called", DataType::Boolean, false),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![value.last])),
            Arc::new(Int64Array::from(vec![0])),
            Arc::new(BooleanArray::from(vec![value.called])),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    /// Whether a value changed since the last cut.
    pub fn moved(&self) -> bool {
        self.moved.load(Ordering::SeqCst)
    }

    /// The cut of epoch `epoch`: the values of the sequences `ids` as they
    /// are now, which epoch `epoch` records; later changes belong to the
    /// next epoch.
    pub fn cut(
        &self,
        epoch: u64,
        ids: impl Iterator<Item = TableId>,
    ) -> BTreeMap<TableId, SequenceValue> {
        let mut state = self.state();
        self.moved.store(false, Ordering::SeqCst);
        state.open_epoch = epoch + 1;
        ids.filter_map(|id| state.entries.get(&id).map(|e| (id, e.value)))
            .collect()
    }
}

/// The error for a sequence a statement's snapshot still names but that
/// was dropped since (its values are gone).
fn dropped(def: &SequenceDef) -> WeirError {
    crate::catalog::undefined_relation(&def.name)
}

/// Moves `value` on by `n` steps of `options`, returning the values
/// handed out; fails (leaving `value` as it was) when a bound without
/// `CYCLE` is passed.
fn advance(
    options: &SequenceOptions,
    value: &mut SequenceValue,
    n: usize,
    name: &str,
) -> WeirResult<Vec<i64>> {
    let SequenceOptions {
        increment,
        min,
        max,
        cycle,
        ..
    } = *options;
    let first = if value.called {
        i128::from(value.last) + i128::from(increment)
    } else {
        i128::from(value.last)
    };
    // The common case, no bound reached: an arithmetic run.
    let last = first + (n as i128 - 1).max(0) * i128::from(increment);
    let within = |v: i128| (i128::from(min)..=i128::from(max)).contains(&v);
    if n == 0 || (within(first) && within(last)) {
        let values: Vec<i64> = (0..n as i128)
            .map(|i| (first + i * i128::from(increment)) as i64)
            .collect();
        if let Some(&end) = values.last() {
            *value = SequenceValue {
                last: end,
                called: true,
            };
        }
        return Ok(values);
    }
    // A bound is reached: step by step, cycling or failing.
    let mut current = *value;
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        let next = if current.called {
            i128::from(current.last) + i128::from(increment)
        } else {
            i128::from(current.last)
        };
        let next = if within(next) {
            next as i64
        } else if !cycle {
            let (bound, which) = if increment > 0 {
                (max, "maximum")
            } else {
                (min, "minimum")
            };
            return Err(WeirError::new(
                SqlState("2200H"),
                format!("nextval: reached {which} value of sequence \"{name}\" ({bound})"),
            ));
        } else if increment > 0 {
            min
        } else {
            max
        };
        values.push(next);
        current = SequenceValue {
            last: next,
            called: true,
        };
    }
    *value = current;
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(options: SequenceOptions) -> (Sequences, SequenceDef) {
        let sequences = Sequences::new(1);
        let def = SequenceDef {
            id: 7,
            name: "s".into(),
            options,
            owned_by: None,
        };
        sequences.insert(7, options, SequenceValue::start(&options));
        (sequences, def)
    }

    #[test]
    fn values_count_from_the_start_and_go_on_across_calls() {
        let (sequences, def) = def(SequenceOptions::ascending(20));
        assert_eq!(sequences.next(&def, 3).unwrap().0, vec![1, 2, 3]);
        assert_eq!(sequences.next(&def, 1).unwrap().0, vec![4]);
        assert_eq!(sequences.next(&def, 0).unwrap().0, Vec::<i64>::new());
        assert_eq!(sequences.next(&def, 2).unwrap().0, vec![5, 6]);
    }

    #[test]
    fn a_bound_fails_the_whole_request_without_cycle_and_wraps_with_it() {
        let options = SequenceOptions {
            max: 3,
            ..SequenceOptions::ascending(23)
        };
        let (sequences, def) = def(options);
        assert_eq!(sequences.next(&def, 2).unwrap().0, vec![1, 2]);
        let err = sequences.next(&def, 2).unwrap_err();
        assert_eq!(err.code, SqlState("2200H"));
        assert!(err.message.contains("maximum value of sequence \"s\" (3)"));
        // Nothing was taken by the failed request.
        assert_eq!(sequences.next(&def, 1).unwrap().0, vec![3]);

        let (sequences, def) = self::def(SequenceOptions {
            cycle: true,
            ..options
        });
        assert_eq!(sequences.next(&def, 5).unwrap().0, vec![1, 2, 3, 1, 2]);
    }

    #[test]
    fn descending_sequences_count_down_to_their_minimum() {
        let options = SequenceOptions {
            start: -1,
            increment: -2,
            min: -5,
            max: -1,
            ..SequenceOptions::ascending(20)
        };
        let (sequences, def) = def(options);
        assert_eq!(sequences.next(&def, 3).unwrap().0, vec![-1, -3, -5]);
        let err = sequences.next(&def, 1).unwrap_err();
        assert!(err.message.contains("minimum value"), "{err}");
    }

    #[test]
    fn the_cut_records_values_and_moves_the_open_epoch() {
        let (sequences, def) = def(SequenceOptions::ascending(20));
        let (_, epoch) = sequences.next(&def, 2).unwrap();
        assert_eq!(epoch, 1);
        assert!(sequences.moved());
        let values = sequences.cut(1, [7, 8].into_iter());
        assert_eq!(
            values[&7],
            SequenceValue {
                last: 2,
                called: true
            }
        );
        assert!(!values.contains_key(&8));
        assert!(!sequences.moved());
        assert_eq!(sequences.next(&def, 1).unwrap(), (vec![3], 2));
        let position = values[&7].to_position();
        assert_eq!(SequenceValue::from_position(&position), Some(values[&7]));
    }

    #[test]
    fn setval_checks_the_bounds() {
        let (sequences, def) = def(SequenceOptions::ascending(23));
        let err = sequences
            .set(
                &def,
                SequenceValue {
                    last: 0,
                    called: true,
                },
            )
            .unwrap_err();
        assert_eq!(err.code, SqlState::NUMERIC_OUT_OF_RANGE);
        sequences
            .set(
                &def,
                SequenceValue {
                    last: 41,
                    called: true,
                },
            )
            .unwrap();
        assert_eq!(sequences.next(&def, 1).unwrap().0, vec![42]);
        sequences
            .set(
                &def,
                SequenceValue {
                    last: 10,
                    called: false,
                },
            )
            .unwrap();
        assert_eq!(sequences.next(&def, 1).unwrap().0, vec![10]);
    }
}
