//! The session's `TimeZone`: the zone `timestamptz` values are read and
//! written in.
//!
//! Weir stores a `timestamptz` as an instant (an Arrow timestamp labelled
//! UTC, `ddl::storage_type`). A session's zone changes only how instants
//! are shown and how local times are read: DataFusion plans `now()`,
//! `timestamptz` literals and casts in the zone ([`Zone::arrow`] is its
//! `execution.time_zone`), tables are read with their `timestamptz`
//! columns labelled with it ([`relabel_schema`], so that `date_trunc`,
//! `extract` and casts to `timestamp` work in local time), and the wire
//! writes instants in it (the patched arrow-pg encoder). Materialized views
//! compute in UTC, whatever zone the session that created them had.

use std::sync::{Arc, LazyLock};

use chrono::{DateTime, NaiveDateTime, Offset};
use chrono_tz::{Tz, TZ_VARIANTS};
use datafusion::arrow::array::timezone::Tz as ArrowTz;
use datafusion::arrow::array::{ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Field, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};

/// A time zone a session may be set to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    /// What `SHOW TIME ZONE` prints: the IANA name as the time zone
    /// database spells it, or PostgreSQL's `<-07>+07` for a fixed offset.
    pub shown: String,
    /// The zone as Arrow and DataFusion take it: an IANA name or `+HH:MM`.
    pub arrow: String,
}

/// The Arrow label of UTC instants (`ddl::storage_type`).
const UTC_LABEL: &str = "+00:00";

/// The IANA names of UTC itself.
const UTC_NAMES: &[&str] = &[
    "UTC",
    "Etc/UTC",
    "Etc/Universal",
    "Universal",
    "Zulu",
    "Etc/Zulu",
    "UCT",
    "Etc/UCT",
];

/// IANA zone names by their lowercase spelling (PostgreSQL matches zone
/// names case-insensitively).
static NAMES: LazyLock<std::collections::HashMap<String, Tz>> = LazyLock::new(|| {
    TZ_VARIANTS
        .iter()
        .map(|tz| (tz.name().to_ascii_lowercase(), *tz))
        .collect()
});

/// Reads a `TimeZone` setting as PostgreSQL takes it: an IANA zone name
/// (`Europe/Paris`, `utc`), `Z`, a number of hours east of UTC
/// (`SET TIME ZONE -7`, `5.5`), or a fixed offset as `SHOW` prints it
/// (`<-07>+07`). `None` if it is none of these.
pub fn parse(value: &str) -> Option<Zone> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("z") || value.eq_ignore_ascii_case("zulu") {
        return parse("UTC");
    }
    if let Some(tz) = NAMES.get(&value.to_ascii_lowercase()) {
        // UTC's names keep the label Weir stores instants under, so that
        // a UTC session reads tables without relabelling them.
        let utc = UTC_NAMES.contains(&tz.name());
        return Some(Zone {
            shown: tz.name().to_owned(),
            arrow: if utc { UTC_LABEL } else { tz.name() }.to_owned(),
        });
    }
    let minutes_east = match value.strip_prefix('<') {
        Some(posix) => posix_offset(posix)?,
        None => {
            let hours: f64 = value.parse().ok()?;
            if !hours.is_finite() || hours.abs() > 15.0 {
                return None;
            }
            (hours * 60.0).round() as i32
        }
    };
    Some(fixed(minutes_east))
}

/// The offset of PostgreSQL's `<+05:30>-05:30` form (what follows `<`).
fn posix_offset(posix: &str) -> Option<i32> {
    let (label, _) = posix.split_once('>')?;
    let (sign, rest) = match label.as_bytes().first()? {
        b'+' => (1, &label[1..]),
        b'-' => (-1, &label[1..]),
        _ => return None,
    };
    let (hours, minutes) = rest.split_once(':').unwrap_or((rest, "0"));
    let (hours, minutes): (i32, i32) = (hours.parse().ok()?, minutes.parse().ok()?);
    (hours <= 15 && minutes < 60).then_some(sign * (hours * 60 + minutes))
}

/// A fixed offset of `minutes_east`, named as PostgreSQL shows it.
fn fixed(minutes_east: i32) -> Zone {
    let sign = if minutes_east < 0 { '-' } else { '+' };
    let (hours, minutes) = (minutes_east.abs() / 60, minutes_east.abs() % 60);
    let label = if minutes == 0 {
        format!("{sign}{hours:02}")
    } else {
        format!("{sign}{hours:02}:{minutes:02}")
    };
    // POSIX offsets count hours west: the sign turns around.
    let posix_sign = if minutes_east < 0 { '+' } else { '-' };
    let posix = if minutes == 0 {
        format!("{posix_sign}{hours:02}")
    } else {
        format!("{posix_sign}{hours:02}:{minutes:02}")
    };
    Zone {
        shown: format!("<{label}>{posix}"),
        arrow: format!("{sign}{hours:02}:{minutes:02}"),
    }
}

/// `schema` with every `timestamptz` column labelled with `zone`; `None`
/// if it has none.
pub fn relabel_schema(schema: &SchemaRef, zone: &str) -> Option<SchemaRef> {
    let zoned = |field: &Field| matches!(field.data_type(), DataType::Timestamp(_, Some(tz)) if tz.as_ref() != zone);
    if !schema.fields().iter().any(|f| zoned(f)) {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::Timestamp(unit, Some(_)) => field
                .as_ref()
                .clone()
                .with_data_type(DataType::Timestamp(*unit, Some(zone.into()))),
            _ => field.as_ref().clone(),
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

/// `batch` with its columns given `schema`'s types: the same instants
/// under another zone's label (no value changes).
pub fn relabel_batch(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(column.clone())
            } else {
                cast(column, field.data_type())
            }
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Timestamps written as PostgreSQL writes them (`2024-03-05 10:00:00.5`),
/// a `timestamptz` in `zone` with its offset (`+01`, `+05:30`).
pub fn timestamps_to_text(input: &ArrayRef, zone: Option<&str>) -> Result<ArrayRef> {
    let DataType::Timestamp(_, label) = input.data_type() else {
        return Err(DataFusionError::Internal(format!(
            "not a timestamp: {}",
            input.data_type()
        )));
    };
    let zone: Option<ArrowTz> = match label {
        Some(label) => Some(zone.unwrap_or(label).parse()?),
        None => None,
    };
    let micros = cast(input, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    let text: StringArray = micros
        .as_primitive::<TimestampMicrosecondType>()
        .iter()
        .map(|value| {
            let utc = DateTime::from_timestamp_micros(value?)?;
            Some(match &zone {
                Some(zone) => {
                    let local = utc.with_timezone(zone);
                    let offset = local.offset().fix().local_minus_utc();
                    format!(
                        "{}{}",
                        timestamp_text(local.naive_local()),
                        offset_text(offset)
                    )
                }
                None => timestamp_text(utc.naive_utc()),
            })
        })
        .collect();
    Ok(Arc::new(text))
}

/// `2024-03-05 10:00:00`, with a fraction only where there is one.
fn timestamp_text(time: NaiveDateTime) -> String {
    let mut text = time.format("%Y-%m-%d %H:%M:%S").to_string();
    let micros = time.and_utc().timestamp_subsec_micros();
    if micros != 0 {
        let fraction = format!(".{micros:06}");
        text.push_str(fraction.trim_end_matches('0'));
    }
    text
}

/// An offset as PostgreSQL writes it: `+01`, `-07`, `+05:30`.
fn offset_text(seconds_east: i32) -> String {
    let sign = if seconds_east < 0 { '-' } else { '+' };
    let minutes = seconds_east.abs() / 60;
    match minutes % 60 {
        0 => format!("{sign}{:02}", minutes / 60),
        m => format!("{sign}{:02}:{m:02}", minutes / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_read_as_postgres_reads_them() {
        let paris = parse("europe/paris").unwrap();
        assert_eq!(paris.shown, "Europe/Paris");
        assert_eq!(paris.arrow, "Europe/Paris");
        assert_eq!(parse("UTC").unwrap().shown, "UTC");
        assert_eq!(parse("utc").unwrap().arrow, "+00:00");
        assert_eq!(parse("Z").unwrap().shown, "UTC");
        let west = parse("-7").unwrap();
        assert_eq!(west.shown, "<-07>+07");
        assert_eq!(west.arrow, "-07:00");
        assert_eq!(parse(&west.shown), Some(west));
        let india = parse("5.5").unwrap();
        assert_eq!(india.shown, "<+05:30>-05:30");
        assert_eq!(india.arrow, "+05:30");
        assert_eq!(parse(&india.shown), Some(india));
        assert_eq!(parse("Mars/Olympus"), None);
        assert_eq!(offset_text(3600), "+01");
        assert_eq!(offset_text(-7 * 3600), "-07");
        assert_eq!(offset_text(5 * 3600 + 1800), "+05:30");
        assert_eq!(parse("99"), None);
    }
}
