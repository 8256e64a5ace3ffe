//! Each Nexmark column's values, computed from the event number: one loop
//! per column over a batch's events, into Arrow buffers.

use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::options::{standard_type, NexmarkSpec};
use crate::generated::{draw, event_time, mix, placeholder};

/// Events per round of the standard mix: 1 person, 3 auctions, 46 bids.
pub(super) const PROPORTION_DENOMINATOR: u64 = 50;
const AUCTION_PROPORTION: u64 = 3;
/// Persons and auctions are numbered from here.
const FIRST_PERSON_ID: u64 = 1000;
const FIRST_AUCTION_ID: u64 = 1000;
const FIRST_CATEGORY_ID: u64 = 10;
const CATEGORIES: u64 = 5;
/// Ids a random choice may run ahead of the latest created one.
const ID_LEAD: u64 = 10;
/// Hot sellers, bidders and auctions are picked from batches this big.
const HOT_BATCH: u64 = 100;
/// One in this many auctions is not a hot seller's (1 in 4), bids not a hot
/// bidder's (1 in 4), not for a hot auction (1 in 2), not through a hot
/// channel (1 in 2).
const HOT_SELLER_RATIO: u64 = 4;
const HOT_BIDDER_RATIO: u64 = 4;
const HOT_AUCTION_RATIO: u64 = 2;
const HOT_CHANNEL_RATIO: u64 = 2;
/// Channels besides the hot ones.
const CHANNELS: u64 = 10_000;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const FIRST_NAMES: [&str; 11] = [
    "peter", "paul", "luke", "john", "saul", "vicky", "kate", "julie", "sarah", "deiter", "walter",
];
const LAST_NAMES: [&str; 9] = [
    "shultz", "abrams", "spencer", "white", "bartels", "walton", "smith", "jones", "noris",
];
const CITIES: [&str; 10] = [
    "phoenix",
    "los angeles",
    "san francisco",
    "boise",
    "portland",
    "bend",
    "redmond",
    "seattle",
    "kent",
    "cheyenne",
];
const STATES: [&str; 6] = ["az", "ca", "id", "or", "wa", "wy"];
/// The average sizes `extra` pads events to, in Nexmark's byte counts.
const PERSON_BYTES: usize = 200;
const AUCTION_BYTES: usize = 500;
const BID_BYTES: usize = 100;
const ITEM_NAME_CHARS: usize = 20;
const DESCRIPTION_CHARS: usize = 100;

/// What every value of a source is computed from.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Event time of event 0, Unix microseconds.
    pub base_micros: i64,
    /// Events per second of event time.
    pub event_rate: u64,
    pub active_people: u64,
    pub in_flight_auctions: u64,
    pub seed: u64,
}

/// The three types columns come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Integer,
    Text,
    Time,
}

/// A column of one of the three streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    PersonId,
    Name,
    EmailAddress,
    CreditCard,
    City,
    State,
    DateTime,
    Extra,
    AuctionId,
    ItemName,
    Description,
    InitialBid,
    Reserve,
    Expires,
    Seller,
    Category,
    Auction,
    Bidder,
    Price,
    Channel,
    Url,
}

impl Column {
    pub(crate) fn name(self) -> &'static str {
        use Column::*;
        match self {
            PersonId | AuctionId => "id",
            Name => "name",
            EmailAddress => "email_address",
            CreditCard => "credit_card",
            City => "city",
            State => "state",
            DateTime => "date_time",
            Extra => "extra",
            ItemName => "item_name",
            Description => "description",
            InitialBid => "initial_bid",
            Reserve => "reserve",
            Expires => "expires",
            Seller => "seller",
            Category => "category",
            Auction => "auction",
            Bidder => "bidder",
            Price => "price",
            Channel => "channel",
            Url => "url",
        }
    }

    fn kind(self) -> Kind {
        use Column::*;
        match self {
            PersonId | AuctionId | InitialBid | Reserve | Seller | Category | Auction | Bidder
            | Price => Kind::Integer,
            DateTime | Expires => Kind::Time,
            _ => Kind::Text,
        }
    }

    pub(crate) fn standard_type(self) -> DataType {
        standard_type(self.kind())
    }

    /// The SQL types it may be declared with.
    pub(crate) fn type_name(self) -> &'static str {
        match self.kind() {
            Kind::Integer => "bigint",
            Kind::Text => "text or varchar",
            Kind::Time => "timestamp (without time zone)",
        }
    }

    /// Whether a column declared with `data_type` can hold it.
    pub(crate) fn accepts(self, data_type: &DataType) -> bool {
        match self.kind() {
            Kind::Integer => data_type == &DataType::Int64,
            Kind::Text => matches!(
                data_type,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ),
            Kind::Time => matches!(data_type, DataType::Timestamp(_, None)),
        }
    }

    /// The stream of draws its values take (distinct per column, so that a
    /// column is computed without the others).
    fn stream(self, config: &Config, part: u64) -> u64 {
        mix(config.seed ^ mix(((self as u64) << 8) | part))
    }
}

/// The rows of `events` (all of `spec`'s kind) with `columns`, of which
/// those `read` marks are computed.
pub(super) fn batch(
    spec: &NexmarkSpec,
    columns: &[Column],
    events: &[u64],
    read: Option<&[bool]>,
) -> RecordBatch {
    let schema = spec.schema();
    let arrays = columns
        .iter()
        .zip(schema.fields())
        .enumerate()
        .map(|(i, (&column, field))| {
            let wanted = read.is_none_or(|r| r.get(i).copied().unwrap_or(true));
            if !wanted {
                return placeholder(field.data_type(), events.len());
            }
            let values = values(&spec.config, column, events);
            if values.data_type() == field.data_type() {
                values
            } else {
                cast(&values, field.data_type()).expect("NexmarkSpec::new checked the column type")
            }
        })
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(events.len()));
    RecordBatch::try_new_with_options(Arc::clone(schema), arrays, &options)
        .expect("generated columns have the schema's types")
}

/// `column`'s values for `events`, in its standard type.
fn values(config: &Config, column: Column, events: &[u64]) -> ArrayRef {
    let ids = Ids::new(config);
    let draws = |part| {
        let stream = column.stream(config, part);
        move |n: u64| draw(stream, n)
    };
    let integers = |value: &dyn Fn(u64) -> u64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(
            events.iter().map(|&n| value(n) as i64),
        ))
    };
    // Draw 0 says whether event `n` takes the hot id, draw 1 which recent
    // one it takes otherwise.
    let hot_or_recent = |ratio: u64,
                         hot_id: &dyn Fn(u64) -> u64,
                         recent_id: &dyn Fn(u64, u64) -> u64|
     -> ArrayRef {
        let (hot, recent) = (draws(0), draws(1));
        integers(&|n| {
            if hot(n).is_multiple_of(ratio) {
                recent_id(n, recent(n))
            } else {
                hot_id(n)
            }
        })
    };
    match column {
        Column::PersonId => integers(&|n| FIRST_PERSON_ID + ids.last_person(n)),
        Column::AuctionId => integers(&|n| FIRST_AUCTION_ID + ids.last_auction(n)),
        // A hot id, except one time in the ratio: then a recent one.
        Column::Seller => hot_or_recent(
            HOT_SELLER_RATIO,
            &|n| FIRST_PERSON_ID + ids.last_person(n) / HOT_BATCH * HOT_BATCH,
            &|n, d| FIRST_PERSON_ID + ids.next_person(n, d),
        ),
        Column::Bidder => hot_or_recent(
            HOT_BIDDER_RATIO,
            &|n| FIRST_PERSON_ID + ids.last_person(n) / HOT_BATCH * HOT_BATCH + 1,
            &|n, d| FIRST_PERSON_ID + ids.next_person(n, d),
        ),
        Column::Auction => hot_or_recent(
            HOT_AUCTION_RATIO,
            &|n| FIRST_AUCTION_ID + ids.last_auction(n) / HOT_BATCH * HOT_BATCH,
            &|n, d| FIRST_AUCTION_ID + ids.next_auction(n, d),
        ),
        Column::Category => {
            let d = draws(0);
            integers(&|n| FIRST_CATEGORY_ID + d(n) % CATEGORIES)
        }
        Column::Price => {
            let d = draws(0);
            integers(&|n| price(d(n)))
        }
        Column::InitialBid => {
            let d = Column::InitialBid.stream(config, 0);
            integers(&|n| price(draw(d, n)))
        }
        Column::Reserve => {
            // The initial bid plus another price.
            let initial = Column::InitialBid.stream(config, 0);
            let d = draws(0);
            integers(&|n| price(draw(initial, n)) + price(d(n)))
        }
        Column::DateTime => times(events.iter().map(|&n| ids.time(n))),
        Column::Expires => {
            let d = draws(0);
            let ahead = config.in_flight_auctions * PROPORTION_DENOMINATOR / AUCTION_PROPORTION;
            times(events.iter().map(|&n| {
                let horizon = (ids.time(n + ahead) - ids.time(n)) as u64;
                ids.time(n) + 1 + (d(n) % (2 * horizon).max(1)) as i64
            }))
        }
        Column::Name => {
            let d = draws(0);
            texts(events, |n, out| {
                let d = d(n);
                out.extend_from_slice(FIRST_NAMES[(d % 11) as usize].as_bytes());
                out.push(b' ');
                out.extend_from_slice(LAST_NAMES[((d >> 32) % 9) as usize].as_bytes());
            })
        }
        Column::EmailAddress => {
            let d = draws(0);
            texts(events, |n, out| {
                let mut letters = Letters::new(d(n));
                letters.push(out, 7);
                out.push(b'@');
                letters.push(out, 5);
                out.extend_from_slice(b".com");
            })
        }
        Column::CreditCard => {
            let d = draws(0);
            texts(events, |n, out| {
                let mut d = d(n);
                for group in 0..4 {
                    if group > 0 {
                        out.push(b' ');
                    }
                    let value = d % 10_000;
                    d /= 10_000;
                    for place in [1000, 100, 10, 1] {
                        out.push(b'0' + (value / place % 10) as u8);
                    }
                }
            })
        }
        Column::City => {
            let d = Column::City.stream(config, 0);
            texts(events, |n, out| {
                out.extend_from_slice(CITIES[(draw(d, n) % 10) as usize].as_bytes())
            })
        }
        Column::State => {
            let d = draws(0);
            texts(events, |n, out| {
                out.extend_from_slice(STATES[(d(n) % 6) as usize].as_bytes())
            })
        }
        Column::ItemName => {
            let d = draws(0);
            texts(events, |n, out| {
                Letters::new(d(n)).push(out, ITEM_NAME_CHARS)
            })
        }
        Column::Description => {
            let d = draws(0);
            texts(events, |n, out| {
                Letters::new(d(n)).push(out, DESCRIPTION_CHARS)
            })
        }
        Column::Channel | Column::Url => {
            let d = Column::Channel.stream(config, 0);
            let channels = channels();
            texts(events, |n, out| {
                let d = draw(d, n);
                let index = if !d.is_multiple_of(HOT_CHANNEL_RATIO) {
                    (d >> 1) % HOT_CHANNELS.len() as u64
                } else {
                    HOT_CHANNELS.len() as u64 + (d >> 1) % CHANNELS
                };
                let (channel, url) = &channels[index as usize];
                let value = if column == Column::Channel {
                    channel
                } else {
                    url
                };
                out.extend_from_slice(value.as_bytes());
            })
        }
        Column::Extra => {
            let d = draws(0);
            let (name, city) = (
                Column::Name.stream(config, 0),
                Column::City.stream(config, 0),
            );
            texts(events, |n, out| {
                // The fixed-size fields of each kind, in Nexmark's count.
                let (size, average) = match super::Table::of_event(n) {
                    super::Table::Person => {
                        let name = draw(name, n);
                        let first = FIRST_NAMES[(name % 11) as usize].len();
                        let last = LAST_NAMES[((name >> 32) % 9) as usize].len();
                        let city = CITIES[(draw(city, n) % 10) as usize].len();
                        // id, name, email (7@5.com), card (19), city, state.
                        (8 + first + 1 + last + 17 + 19 + city + 2, PERSON_BYTES)
                    }
                    super::Table::Auction => (
                        8 + ITEM_NAME_CHARS + DESCRIPTION_CHARS + 5 * 8,
                        AUCTION_BYTES,
                    ),
                    super::Table::Bid => (4 * 8, BID_BYTES),
                };
                let d = d(n);
                Letters::new(d).push(out, extra_length(size, average, d >> 32));
            })
        }
    }
}

/// How ids and times follow from the event number.
struct Ids<'a> {
    config: &'a Config,
}

impl<'a> Ids<'a> {
    fn new(config: &'a Config) -> Self {
        Ids { config }
    }

    /// The id (from 0) of the latest person created by event `n`.
    fn last_person(&self, n: u64) -> u64 {
        n / PROPORTION_DENOMINATOR
    }

    /// The id (from 0) of the latest auction created by event `n`.
    fn last_auction(&self, n: u64) -> u64 {
        let (round, offset) = (n / PROPORTION_DENOMINATOR, n % PROPORTION_DENOMINATOR);
        match offset {
            0 => (round * AUCTION_PROPORTION).saturating_sub(1),
            1..=3 => round * AUCTION_PROPORTION + offset - 1,
            _ => round * AUCTION_PROPORTION + AUCTION_PROPORTION - 1,
        }
    }

    /// A person among the active ones (or up to [`ID_LEAD`] ahead).
    fn next_person(&self, n: u64, draw: u64) -> u64 {
        let people = self.last_person(n) + 1;
        let active = people.min(self.config.active_people);
        people - active + draw % (active + ID_LEAD)
    }

    /// An auction among those in flight (or up to [`ID_LEAD`] ahead).
    fn next_auction(&self, n: u64, draw: u64) -> u64 {
        let latest = self.last_auction(n);
        let earliest = latest.saturating_sub(self.config.in_flight_auctions);
        earliest + draw % (latest - earliest + 1 + ID_LEAD)
    }

    /// Event `n`'s time, Unix microseconds.
    fn time(&self, n: u64) -> i64 {
        let micros = event_time(self.config.base_micros, self.config.event_rate, n);
        micros.clamp(i64::MIN.into(), i64::MAX.into()) as i64
    }
}

/// A price in cents: `100 * 10^(6u)`, `u` uniform in `[0, 1)`, rounded.
fn price(draw: u64) -> u64 {
    let unit = (draw >> 11) as f64 / (1u64 << 53) as f64;
    (10f64.powf(unit * 6.0) * 100.0).round() as u64
}

/// The length of `extra` for an event of `size` bytes padded to `average`
/// on average: uniform within a fifth of the shortfall around it.
fn extra_length(size: usize, average: usize, draw: u64) -> usize {
    let Some(wanted) = average.checked_sub(size) else {
        return 0;
    };
    let delta = (wanted + 2) / 5;
    let shortest = wanted - delta;
    if delta == 0 {
        shortest
    } else {
        shortest + (draw % (2 * delta as u64)) as usize
    }
}

/// Lowercase letters from a row's draw: four per 64-bit step of a
/// SplitMix64 sequence seeded with it.
struct Letters {
    state: u64,
}

impl Letters {
    fn new(seed: u64) -> Self {
        Letters { state: seed }
    }

    fn push(&mut self, out: &mut Vec<u8>, count: usize) {
        let mut left = count;
        while left > 0 {
            self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut h = mix(self.state);
            for _ in 0..left.min(4) {
                // A 16-bit lane scaled onto 0..26.
                out.push(b'a' + (((h & 0xFFFF) * 26) >> 16) as u8);
                h >>= 16;
            }
            left -= left.min(4);
        }
    }
}

/// A text column with `write(n, bytes)` appending event `n`'s value.
fn texts(events: &[u64], mut write: impl FnMut(u64, &mut Vec<u8>)) -> ArrayRef {
    let mut bytes = Vec::with_capacity(events.len() * 16);
    let mut offsets = Vec::with_capacity(events.len() + 1);
    offsets.push(0i32);
    for &n in events {
        write(n, &mut bytes);
        offsets.push(i32::try_from(bytes.len()).expect("a batch's text stays under 2 GiB"));
    }
    debug_assert!(bytes.is_ascii());
    // SAFETY: every value is ASCII (letters, digits and the constant
    // names above), so valid UTF-8, and the offsets rise from 0 to the
    // bytes' length. (Checking again cost a visible share of a source.)
    let offsets = unsafe { OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)) };
    Arc::new(unsafe { StringArray::new_unchecked(offsets, Buffer::from_vec(bytes), None) })
}

/// A timestamp column in microseconds.
fn times(values: impl Iterator<Item = i64>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from_iter_values(values))
}

/// The channels, hot ones first, each with its URL.
fn channels() -> &'static [(String, String)] {
    static CHANNEL_URLS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    CHANNEL_URLS.get_or_init(|| {
        let hot = HOT_CHANNELS
            .iter()
            .enumerate()
            .map(|(i, name)| (name.to_string(), base_url(i as u64)));
        let others = (0..CHANNELS).map(|i| {
            let mut url = base_url(i);
            // Nine in ten channels add their id to the URL.
            if !draw(CHANNEL_URL_SEED, i).is_multiple_of(10) {
                let id = (i as i32).reverse_bits().unsigned_abs();
                url.push_str(&format!("&channel_id={id}"));
            }
            (format!("channel-{i}"), url)
        });
        hot.chain(others).collect()
    })
}

const CHANNEL_URL_SEED: u64 = 0x6E65_786D_6172_6B00;

/// A Nexmark item URL: three path parts of 3 or 4 characters, letters with
/// an underscore one time in 13.
fn base_url(seed: u64) -> String {
    let mut url = String::from("https://www.nexmark.com");
    for part in 0..3 {
        url.push('/');
        let d = draw(CHANNEL_URL_SEED ^ seed, part);
        let len = 3 + (d % 2) as usize;
        for k in 0..len {
            let c = d >> (8 + 8 * k);
            if c.is_multiple_of(13) {
                url.push('_');
            } else {
                url.push((b'a' + ((c >> 4) % 26) as u8) as char);
            }
        }
    }
    url.push_str("/item.htm?query=1");
    url
}
