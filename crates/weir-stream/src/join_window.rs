//! The window of an inner or semi join whose keys pair two columns a watermark
//! bounds (a window join: `a.window_start = b.window_start`): once the
//! right side's bound passes a window, no right row of it can come, so
//! the left rows of that window are no longer needed, and the other way
//! round. The join drops them from its state at the cut (see
//! [`crate::watermark`]); the output rows they made stay.

use std::collections::BTreeMap;

use datafusion::arrow::array::ArrayRef;
use weir_state::KeyId;

use crate::keyed_rows::KeyedRows;
use crate::watermark::{at_or_above, event_times, ColumnBound, Watermarks};
use crate::Result;

/// One side's windows: its keys by window value.
#[derive(Debug, Default)]
struct SideWindows {
    /// Keys by window value, since they were listed. A key whose rows
    /// all went and whose id was reused stays listed under its old value
    /// too: rows are checked against the bound when they expire.
    listed: BTreeMap<i64, Vec<KeyId>>,
    /// Per key id: whether it is listed.
    is_listed: Vec<bool>,
}

/// The window key of a join and each side's windows.
#[derive(Debug)]
pub(crate) struct JoinWindows {
    /// The join key (by position) that holds the window.
    pub key: usize,
    /// The bounds of the left and right window columns.
    bounds: [ColumnBound; 2],
    sides: [SideWindows; 2],
    /// The bound each side's rows expired below, if any.
    expired: [Option<i64>; 2],
}

impl JoinWindows {
    /// The windows of join key `key`, bounded by `left` and `right`.
    pub fn new(key: usize, left: ColumnBound, right: ColumnBound) -> Self {
        JoinWindows {
            key,
            bounds: [left, right],
            sides: [SideWindows::default(), SideWindows::default()],
            expired: [None, None],
        }
    }

    /// Lists the keys `ids` of rows whose window values are `values`, on
    /// side `side` (0: left).
    pub fn list(&mut self, side: usize, ids: &[KeyId], values: &ArrayRef) -> Result<()> {
        let windows = &mut self.sides[side];
        let times = event_times(values)?;
        for (&id, time) in ids.iter().zip(times.iter()) {
            let slot = id as usize;
            if windows.is_listed.len() <= slot {
                windows.is_listed.resize(slot + 1, false);
            }
            // A NULL key joins nothing and never expires.
            if let (false, Some(time)) = (windows.is_listed[slot], time) {
                windows.is_listed[slot] = true;
                windows.listed.entry(time).or_default().push(id);
            }
        }
        Ok(())
    }

    /// Drops from `stores` (left, right) the rows the other side's bound
    /// under `watermarks` has passed.
    pub fn expire(&mut self, watermarks: &Watermarks, stores: [&mut KeyedRows; 2]) -> Result<()> {
        let [left, right] = stores;
        for (side, store) in [(0, left), (1, right)] {
            // A side's rows wait for the other side's rows.
            let Some(bound) = self.bounds[1 - side].value(watermarks)? else {
                continue;
            };
            if self.expired[side].is_some_and(|e| e >= bound) {
                continue;
            }
            self.expired[side] = Some(bound);
            let windows = &mut self.sides[side];
            let still = windows.listed.split_off(&bound);
            let passed = std::mem::replace(&mut windows.listed, still);
            let ids: Vec<KeyId> = passed.into_values().flatten().collect();
            for &id in &ids {
                windows.is_listed[id as usize] = false;
            }
            // Only rows still below the bound: a reused key id may hold a
            // later window's rows, and is listed again.
            let expr = store.key_exprs()[self.key].clone();
            let kept = store.remove_where(&ids, |rows| {
                at_or_above(&expr.evaluate(rows)?.into_array(rows.num_rows())?, bound)
            })?;
            if !kept.is_empty() {
                let rows = store.rows_with_keys(kept.iter().copied())?;
                let columns = store.key_columns(&rows.rows)?;
                let ids = store.find_keys(&columns, rows.len())?;
                let ids: Vec<KeyId> = ids.into_iter().flatten().collect();
                self.list(side, &ids, &columns[self.key])?;
            }
        }
        Ok(())
    }
}
