//! A `nexmark` source's options and columns, validated.

use std::collections::BTreeMap;
use std::ops::Range;
use std::str::FromStr;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

use super::columns::{self, Column};
use crate::paced::RowGenerator;

/// The version of the generator new sources get; a source keeps the
/// version it was created with, so that its events never change under it.
pub const GENERATOR_VERSION: u32 = 1;

/// A `nexmark` source's options do not fit its columns, or are malformed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NexmarkError(pub String);

/// Which of Nexmark's three streams a source emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// New people, 1 event in 50.
    Person,
    /// New auctions, 3 events in 50.
    Auction,
    /// Bids, 46 events in 50.
    Bid,
}

impl Table {
    /// The kind of event `n`.
    pub fn of_event(n: u64) -> Table {
        match n % columns::PROPORTION_DENOMINATOR {
            0 => Table::Person,
            1..=3 => Table::Auction,
            _ => Table::Bid,
        }
    }

    /// Its name in `nexmark.table.type`.
    pub fn name(self) -> &'static str {
        match self {
            Table::Person => "person",
            Table::Auction => "auction",
            Table::Bid => "bid",
        }
    }

    /// Its columns, in their standard order.
    fn columns(self) -> &'static [Column] {
        use Column::*;
        match self {
            Table::Person => &[
                PersonId,
                Name,
                EmailAddress,
                CreditCard,
                City,
                State,
                DateTime,
                Extra,
            ],
            Table::Auction => &[
                AuctionId,
                ItemName,
                Description,
                InitialBid,
                Reserve,
                DateTime,
                Expires,
                Seller,
                Category,
                Extra,
            ],
            Table::Bid => &[Auction, Bidder, Price, Channel, Url, DateTime, Extra],
        }
    }
}

impl FromStr for Table {
    type Err = NexmarkError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "person" => Ok(Table::Person),
            "auction" => Ok(Table::Auction),
            "bid" => Ok(Table::Bid),
            _ => Err(NexmarkError(format!(
                "nexmark option 'nexmark.table.type' must be person, auction or bid, got '{s}'"
            ))),
        }
    }
}

/// The standard columns of the stream `options` name
/// (`nexmark.table.type`): a `CREATE SOURCE` without a column list gets
/// these.
pub fn table_schema(options: &BTreeMap<String, String>) -> Result<SchemaRef, NexmarkError> {
    let table = table_type(options)?;
    Ok(Arc::new(Schema::new(
        table
            .columns()
            .iter()
            .map(|c| Field::new(c.name(), c.standard_type(), false))
            .collect::<Vec<_>>(),
    )))
}

fn table_type(options: &BTreeMap<String, String>) -> Result<Table, NexmarkError> {
    options
        .get("nexmark.table.type")
        .ok_or_else(|| {
            NexmarkError(
                "a nexmark source needs nexmark.table.type = 'person', 'auction' or 'bid'".into(),
            )
        })?
        .parse()
}

/// The validated options of a `nexmark` source together with its schema.
#[derive(Debug, Clone)]
pub struct NexmarkSpec {
    schema: SchemaRef,
    table: Table,
    /// One per field of `schema`, in order.
    columns: Vec<Column>,
    /// What every value is computed from.
    pub(super) config: columns::Config,
    emit_rate: u64,
    event_num: Option<u64>,
}

impl NexmarkSpec {
    /// Validates a source's options against its schema. `options` are the
    /// `WITH` options except `connector`, keys in lower case;
    /// `created_micros` (Unix microseconds) is the default base time.
    pub fn new(
        schema: SchemaRef,
        options: &BTreeMap<String, String>,
        created_micros: i64,
    ) -> Result<Self, NexmarkError> {
        let table = table_type(options)?;
        let mut config = columns::Config {
            base_micros: created_micros.div_euclid(1000) * 1000,
            event_rate: 10_000,
            active_people: 1000,
            in_flight_auctions: 100,
            seed: 0,
        };
        let mut emit_rate = None;
        let mut event_num = None;
        for (key, value) in options {
            match key.as_str() {
                "nexmark.table.type" => {}
                "nexmark.event.num" => event_num = Some(parse(key, value)?),
                "nexmark.event.rate" => config.event_rate = positive(key, value)?,
                "nexmark.emit.rate" => emit_rate = Some(positive(key, value)?),
                "nexmark.active.people" => config.active_people = positive(key, value)?,
                "nexmark.in.flight.auctions" => config.in_flight_auctions = positive(key, value)?,
                "nexmark.seed" => config.seed = parse(key, value)?,
                "nexmark.base.time" => {
                    let millis: i64 = parse(key, value)?;
                    config.base_micros = millis.checked_mul(1000).ok_or_else(|| {
                        NexmarkError(format!("nexmark.base.time {millis} is out of range"))
                    })?;
                }
                _ => return Err(NexmarkError(format!("unknown nexmark option '{key}'"))),
            }
        }
        let columns = schema
            .fields()
            .iter()
            .map(|field| {
                let column = table
                    .columns()
                    .iter()
                    .find(|c| c.name() == field.name())
                    .ok_or_else(|| {
                        NexmarkError(format!(
                            "a nexmark {} source has no column \"{}\"; its columns: {}",
                            table.name(),
                            field.name(),
                            table
                                .columns()
                                .iter()
                                .map(|c| c.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })?;
                if !column.accepts(field.data_type()) {
                    return Err(NexmarkError(format!(
                        "column \"{}\" of a nexmark source must be {}",
                        field.name(),
                        column.type_name(),
                    )));
                }
                Ok(*column)
            })
            .collect::<Result<_, _>>()?;
        Ok(NexmarkSpec {
            schema,
            table,
            columns,
            emit_rate: emit_rate.unwrap_or(config.event_rate),
            config,
            event_num,
        })
    }

    /// The same source generated by generator `version`.
    pub fn with_version(self, version: u32) -> Result<Self, NexmarkError> {
        if version != GENERATOR_VERSION {
            return Err(NexmarkError(format!(
                "nexmark generator version {version} is unknown to this server (it knows {GENERATOR_VERSION})"
            )));
        }
        Ok(self)
    }

    /// The source's columns.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The stream it emits.
    pub fn table(&self) -> Table {
        self.table
    }
}

impl RowGenerator for NexmarkSpec {
    fn generate(&self, indexes: Range<u64>, read: Option<&[bool]>) -> RecordBatch {
        let events: Vec<u64> = indexes
            .filter(|&n| Table::of_event(n) == self.table)
            .collect();
        columns::batch(self, &self.columns, &events, read)
    }

    fn per_second(&self) -> u64 {
        self.emit_rate
    }

    fn end(&self) -> Option<u64> {
        self.event_num
    }
}

fn parse<T: FromStr>(key: &str, value: &str) -> Result<T, NexmarkError> {
    value.parse().map_err(|_| {
        NexmarkError(format!(
            "nexmark option '{key}' must be an integer, got '{value}'"
        ))
    })
}

fn positive(key: &str, value: &str) -> Result<u64, NexmarkError> {
    match parse(key, value)? {
        0 => Err(NexmarkError(format!(
            "nexmark option '{key}' must be a positive integer, got '{value}'"
        ))),
        n => Ok(n),
    }
}

/// The type a column of `kind` has unless declared otherwise.
pub(super) fn standard_type(kind: columns::Kind) -> DataType {
    match kind {
        columns::Kind::Integer => DataType::Int64,
        columns::Kind::Text => DataType::Utf8,
        columns::Kind::Time => DataType::Timestamp(TimeUnit::Microsecond, None),
    }
}
