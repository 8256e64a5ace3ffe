//! `hop_window_starts(ts, slide, size, origin)`: the starts of the
//! hopping windows that hold `ts`, which `HOP(...)` (`weir-sql`'s
//! `windows.rs`) unnests into a row per window.
//!
//! Windows of `size` start at `origin + k * slide` for every integer `k`;
//! those holding `ts` start after `ts - size` and at or before `ts`, the
//! latest at `origin + floor((ts - origin) / slide) * slide`. Month
//! intervals have no fixed length and are refused (22023); a `slide` or
//! `size` of zero or less is 22023 too.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray, TimestampMicrosecondArray};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::{
    DataType, Field, IntervalMonthDayNanoType, IntervalUnit, TimeUnit, TimestampMicrosecondType,
};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::ScalarUDF;

use crate::error::{SqlState, WeirError};

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// The function, registered in every session.
pub fn hop_window_starts() -> ScalarUDF {
    let timestamp = DataType::Timestamp(TimeUnit::Microsecond, None);
    let interval = DataType::Interval(IntervalUnit::MonthDayNano);
    let output = DataType::List(Arc::new(Field::new_list_field(timestamp.clone(), true)));
    crate::pg_functions::udf(
        "hop_window_starts",
        vec![timestamp.clone(), interval.clone(), interval, timestamp],
        output,
        starts,
    )
}

/// An interval as microseconds, if it has no months.
fn micros(interval: datafusion::arrow::datatypes::IntervalMonthDayNano) -> Result<i64> {
    if interval.months != 0 {
        return Err(invalid("HOP window lengths cannot be in months or years"));
    }
    Ok(i64::from(interval.days) * MICROS_PER_DAY + interval.nanoseconds / 1000)
}

fn invalid(message: &str) -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(SqlState("22023"), message)))
}

/// Each row's window starts, latest last (a NULL time or argument: NULL).
fn starts(args: &[ArrayRef]) -> Result<ArrayRef> {
    let times = args[0].as_primitive::<TimestampMicrosecondType>();
    let slides = args[1].as_primitive::<IntervalMonthDayNanoType>();
    let sizes = args[2].as_primitive::<IntervalMonthDayNanoType>();
    let origins = args[3].as_primitive::<TimestampMicrosecondType>();
    let mut values = Vec::with_capacity(times.len() * 2);
    let mut lengths = Vec::with_capacity(times.len());
    let mut valid = Vec::with_capacity(times.len());
    // Per row: the windows a row falls in depend on its own time (the
    // arguments are constants in HOP's use, but may be columns).
    for i in 0..times.len() {
        let present = [
            times.is_valid(i),
            slides.is_valid(i),
            sizes.is_valid(i),
            origins.is_valid(i),
        ];
        if present.contains(&false) {
            lengths.push(0);
            valid.push(false);
            continue;
        }
        let (slide, size) = (micros(slides.value(i))?, micros(sizes.value(i))?);
        if slide <= 0 || size <= 0 {
            return Err(invalid("HOP needs a slide and a size greater than zero"));
        }
        let (time, origin) = (times.value(i), origins.value(i));
        let latest = origin + (time - origin).div_euclid(slide) * slide;
        let mut start = latest - (size - 1).div_euclid(slide) * slide;
        let mut count = 0;
        while start <= latest {
            if start + size > time {
                values.push(start);
                count += 1;
            }
            start += slide;
        }
        lengths.push(count);
        valid.push(true);
    }
    let list = ListArray::try_new(
        Arc::new(Field::new_list_field(
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        )),
        OffsetBuffer::from_lengths(lengths),
        Arc::new(TimestampMicrosecondArray::from(values)),
        Some(NullBuffer::from(valid)),
    )?;
    Ok(Arc::new(list))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::IntervalMonthDayNanoArray;
    use datafusion::arrow::datatypes::IntervalMonthDayNano;

    use super::*;

    fn seconds(s: i64) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(0, 0, s * 1_000_000_000)
    }

    fn windows(
        times: Vec<Option<i64>>,
        slide: i64,
        size: i64,
        origin: i64,
    ) -> Vec<Option<Vec<i64>>> {
        let n = times.len();
        let args: Vec<ArrayRef> = vec![
            Arc::new(TimestampMicrosecondArray::from(times)),
            Arc::new(IntervalMonthDayNanoArray::from(vec![seconds(slide); n])),
            Arc::new(IntervalMonthDayNanoArray::from(vec![seconds(size); n])),
            Arc::new(TimestampMicrosecondArray::from(vec![origin; n])),
        ];
        let list = starts(&args).expect("starts");
        let list = list.as_list::<i32>();
        (0..n)
            .map(|i| {
                list.is_valid(i).then(|| {
                    let starts = list.value(i);
                    let starts = starts.as_primitive::<TimestampMicrosecondType>();
                    starts.values().iter().map(|m| m / 1_000_000).collect()
                })
            })
            .collect()
    }

    #[test]
    fn a_time_falls_in_every_window_that_holds_it() {
        let s = 1_000_000;
        // Windows of 10 s every 2 s: five hold each time.
        assert_eq!(
            windows(
                vec![Some(13 * s), Some(14 * s - 1), None, Some(-s)],
                2,
                10,
                0
            ),
            vec![
                Some(vec![4, 6, 8, 10, 12]),
                Some(vec![4, 6, 8, 10, 12]),
                None,
                Some(vec![-10, -8, -6, -4, -2])
            ]
        );
        // A slide that does not divide the size, and an origin: windows of
        // 5 s every 3 s from 1 s.
        assert_eq!(windows(vec![Some(7 * s)], 3, 5, s), vec![Some(vec![4, 7])]);
        // Gaps: windows of 1 s every 3 s; a time between them is in none.
        assert_eq!(
            windows(vec![Some(2 * s), Some(3 * s)], 3, 1, 0),
            vec![Some(vec![]), Some(vec![3])]
        );
    }

    #[test]
    fn month_slides_and_empty_windows_are_refused() {
        let args = |slide: IntervalMonthDayNano| -> Vec<ArrayRef> {
            vec![
                Arc::new(TimestampMicrosecondArray::from(vec![0])),
                Arc::new(IntervalMonthDayNanoArray::from(vec![slide])),
                Arc::new(IntervalMonthDayNanoArray::from(vec![seconds(10)])),
                Arc::new(TimestampMicrosecondArray::from(vec![0])),
            ]
        };
        assert!(starts(&args(IntervalMonthDayNano::new(1, 0, 0))).is_err());
        assert!(starts(&args(seconds(0))).is_err());
    }
}
