//! The `nexmark` connector: the person, auction and bid streams of the
//! Nexmark benchmark, for
//! `CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'bid')`.
//!
//! Events are numbered 0, 1, 2, ... across the three streams in Nexmark's
//! standard mix: of every 50 events, one is a new person, three are new
//! auctions and 46 are bids (event `n` is a person when `n % 50 == 0`, an
//! auction when it is 1 to 3, a bid otherwise), and event `n` happens at
//! `base.time + n / event.rate` seconds. A source of one kind emits that
//! kind's events; its position is the event number, so that the three
//! sources of one configuration describe one event stream.
//!
//! The values follow the Nexmark generator's rules (the Beam and Flink
//! Nexmark kits; RisingWave's `nexmark` crate implements the same):
//! person and auction ids count up from 1000 with the events that create
//! them; 3 of 4 auctions belong to a hot seller and 3 of 4 bids come from
//! a hot bidder (the first, resp. second, person of the latest hundred),
//! half of the bids go to a hot auction (the first of the latest hundred)
//! and half come through one of four hot channels; other sellers and
//! bidders are drawn from the `active.people` latest people, other
//! auctions from the `in.flight.auctions` latest ones (both with a lead of
//! ten ids not created yet, as in Nexmark); prices are `100 * 10^(6u)`
//! cents for `u` uniform in `[0, 1)`; an auction expires after a random
//! span up to twice the time it takes `in.flight.auctions` auctions to be
//! created; `extra` pads each event to the standard average size (200
//! bytes for a person, 500 for an auction, 100 for a bid). Each value is
//! a pure function of the seed, the event number and the column (no
//! sequential random state, unlike Nexmark's per-event generator), so a
//! reader resumes at any event after a crash and produces exactly what it
//! would have produced, and a column no view reads is not computed. The
//! random strings are Weir's own draws, not the Java kit's.
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `nexmark.table.type` | (required) | `person`, `auction` or `bid` |
//! | `nexmark.event.num` | none | the stream ends after this many events (of all three kinds) |
//! | `nexmark.event.rate` | `10000` | events per second of event time |
//! | `nexmark.emit.rate` | the event rate | events per second the source emits (higher: replay faster than real time) |
//! | `nexmark.active.people` | `1000` | people that sellers and bidders are drawn from |
//! | `nexmark.in.flight.auctions` | `100` | auctions that bids are drawn from |
//! | `nexmark.seed` | `0` | the seed every value derives from |
//! | `nexmark.base.time` | the source's creation | event time of event 0, milliseconds since 1970 |
//!
//! The columns (a `CREATE SOURCE` without a column list gets them all; one
//! with a list names any of them, with these types; text columns may be
//! `text` or `varchar`, timestamps any precision):
//!
//! | kind | columns |
//! |---|---|
//! | `person` | `id bigint, name varchar, email_address varchar, credit_card varchar, city varchar, state varchar, date_time timestamp, extra varchar` |
//! | `auction` | `id bigint, item_name varchar, description varchar, initial_bid bigint, reserve bigint, date_time timestamp, expires timestamp, seller bigint, category bigint, extra varchar` |
//! | `bid` | `auction bigint, bidder bigint, price bigint, channel varchar, url varchar, date_time timestamp, extra varchar` |

mod columns;
mod options;

pub use options::{table_schema, NexmarkError, NexmarkSpec, Table, GENERATOR_VERSION};

use crate::paced::PacedSource;

/// A `nexmark` source as the stream runtime reads it.
pub type NexmarkSource = PacedSource<NexmarkSpec>;

#[cfg(test)]
mod tests;
