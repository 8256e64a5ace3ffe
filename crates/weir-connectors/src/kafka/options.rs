//! A Kafka source's options, as `CREATE SOURCE ... WITH (...)` gives them
//! (RisingWave's and Flink SQL's names).

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

use std::sync::Arc;

use super::metadata::Include;
use crate::avro::AvroFormat;
use crate::records::{BadRecords, Format};

/// Where a partition's first read starts, for a view that has not read
/// it yet (`scan.startup.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Startup {
    /// The oldest record the broker still holds.
    Earliest,
    /// After the newest record when the view's reader first opens.
    Latest,
    /// The first record at or after this time (unix milliseconds).
    Timestamp(i64),
}

/// A Kafka source's validated options.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// The topic read.
    pub topic: String,
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Where a partition not read before starts.
    pub startup: Startup,
    /// How a record's value is decoded.
    pub format: Format,
    /// What a record that does not parse does.
    pub bad_records: BadRecords,
    /// `properties.<name>` options, passed to librdkafka as `<name>`.
    pub properties: BTreeMap<String, String>,
    /// Columns of records' metadata (`INCLUDE`, as `include.<kind>`
    /// options), with their names.
    pub include: Vec<(Include, String)>,
}

/// librdkafka settings Weir sets itself: a source reads at checkpointed
/// offsets and commits nothing to the broker.
const RESERVED: [&str; 6] = [
    "bootstrap.servers",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "isolation.level",
    "enable.partition.eof",
];

impl KafkaOptions {
    /// Reads `options` (keys lowercased, without `connector`).
    pub fn parse(options: &BTreeMap<String, String>) -> Result<Self, String> {
        let mut topic = None;
        let mut brokers = None;
        let mut mode = "earliest".to_owned();
        let mut timestamp = None;
        let mut format = None;
        let mut delimiter = b',';
        let mut avro_schema = None;
        let mut bad_records = BadRecords::Fail;
        let mut properties = BTreeMap::new();
        let mut include = Vec::new();
        for (key, value) in options {
            match key.as_str() {
                "topic" => topic = Some(value.clone()),
                // RisingWave's name, then Flink's.
                "properties.bootstrap.server" | "properties.bootstrap.servers" => {
                    brokers = Some(value.clone())
                }
                "scan.startup.mode" => mode = value.to_ascii_lowercase(),
                "scan.startup.timestamp.millis" | "scan.startup.timestamp-millis" => {
                    timestamp = Some(value.parse::<i64>().map_err(|_| {
                        format!("{key} = '{value}' is not a time in unix milliseconds")
                    })?)
                }
                "format" | "value.format" | "encode" => format = Some(value.to_ascii_lowercase()),
                "csv.delimiter" | "csv.field-delimiter" => {
                    delimiter = match value.as_bytes() {
                        [byte] if byte.is_ascii() => *byte,
                        _ => return Err(format!("{key} = '{value}' is not one ASCII character")),
                    }
                }
                "bad_records" => bad_records = BadRecords::parse(value)?,
                // Read by the server; checked here with the other options.
                crate::dead_letters::RETENTION_OPTION => {
                    crate::dead_letters::retention(options)?;
                }
                "avro.schema" => avro_schema = Some(value.clone()),
                _ if key.starts_with("include.") => {
                    let kind = Include::named(&key["include.".len()..])?;
                    let name = match value.as_str() {
                        "" => kind.default_name().to_owned(),
                        name => name.to_owned(),
                    };
                    include.push((kind, name));
                }
                _ => match key.strip_prefix("properties.") {
                    Some(name) if RESERVED.contains(&name) => {
                        return Err(format!(
                            "option \"{key}\" is set by Weir: a source reads at the offsets in \
                             its checkpoints and commits none to Kafka"
                        ))
                    }
                    Some(name) => {
                        properties.insert(name.to_owned(), value.clone());
                    }
                    None => return Err(format!("option \"{key}\" is not recognized")),
                },
            }
        }
        let topic = topic.ok_or("a Kafka source needs topic = '...'")?;
        let brokers =
            brokers.ok_or("a Kafka source needs properties.bootstrap.server = 'host:port'")?;
        let startup = match (mode.as_str(), timestamp) {
            ("earliest", None) => Startup::Earliest,
            ("latest", None) => Startup::Latest,
            ("timestamp", Some(millis)) => Startup::Timestamp(millis),
            ("timestamp", None) => {
                return Err("scan.startup.mode = 'timestamp' needs \
                            scan.startup.timestamp.millis = '...'"
                    .into())
            }
            ("earliest" | "latest", Some(_)) => {
                return Err(
                    "scan.startup.timestamp.millis needs scan.startup.mode = 'timestamp'".into(),
                )
            }
            _ => {
                return Err(format!(
                    "scan.startup.mode = '{mode}': use 'earliest', 'latest' or 'timestamp'"
                ))
            }
        };
        let format = match format.as_deref() {
            Some("json") => Format::Json,
            Some("csv") => Format::Csv { delimiter },
            Some(avro @ ("avro" | "avro-confluent")) => {
                let schema = avro_schema.take().ok_or(
                    "format = 'avro' needs avro.schema = '...', the writer's schema \
                     (Weir asks no schema registry)",
                )?;
                Format::Avro(Arc::new(AvroFormat::new(
                    &schema,
                    avro == "avro-confluent",
                )?))
            }
            Some(other) => {
                return Err(format!(
                    "format '{other}' is not supported for a Kafka source \
                     (Weir reads 'json', 'csv', 'avro' and 'avro-confluent')"
                ))
            }
            None => return Err("a Kafka source needs format = 'json', 'csv' or 'avro'".into()),
        };
        if avro_schema.is_some() {
            return Err("avro.schema is an option of format = 'avro'".into());
        }
        Ok(KafkaOptions {
            topic,
            brokers,
            startup,
            format,
            bad_records,
            properties,
            include,
        })
    }

    /// The settings of a consumer that reads assigned partitions at given
    /// offsets, sees only committed transactions, and commits nothing.
    pub fn consumer_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", "weir")
            .set("client.id", "weir")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // A checkpointed offset the broker no longer holds is an
            // error, not a silent jump.
            .set("auto.offset.reset", "error")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "false");
        for (name, value) in &self.properties {
            config.set(name, value);
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_risingwave_and_flink_names() {
        let base = [
            ("topic", "t"),
            ("properties.bootstrap.server", "127.0.0.1:9092"),
            ("format", "json"),
        ];
        let parsed = KafkaOptions::parse(&options(&base)).unwrap();
        assert_eq!(parsed.startup, Startup::Earliest);
        assert_eq!(parsed.bad_records, BadRecords::Fail);
        let flink = KafkaOptions::parse(&options(&[
            ("topic", "t"),
            ("properties.bootstrap.servers", "b:1"),
            ("value.format", "csv"),
            ("csv.field-delimiter", ";"),
            ("scan.startup.mode", "timestamp"),
            ("scan.startup.timestamp-millis", "1700000000000"),
            ("properties.fetch.max.bytes", "1000000"),
        ]))
        .unwrap();
        assert_eq!(flink.brokers, "b:1");
        assert_eq!(flink.startup, Startup::Timestamp(1_700_000_000_000));
        assert!(matches!(flink.format, Format::Csv { delimiter: b';' }));
        assert_eq!(flink.properties["fetch.max.bytes"], "1000000");
    }

    #[test]
    fn refuses_what_it_cannot_do() {
        for (pairs, expected) in [
            (vec![("format", "json")], "topic"),
            (vec![("topic", "t"), ("format", "json")], "bootstrap"),
            (
                vec![("topic", "t"), ("properties.bootstrap.server", "b")],
                "format",
            ),
            (
                vec![
                    ("topic", "t"),
                    ("properties.bootstrap.server", "b"),
                    ("format", "avro"),
                ],
                "'avro'",
            ),
            (
                vec![
                    ("topic", "t"),
                    ("properties.bootstrap.server", "b"),
                    ("format", "json"),
                    ("scan.startup.mode", "timestamp"),
                ],
                "timestamp.millis",
            ),
            (
                vec![
                    ("topic", "t"),
                    ("properties.bootstrap.server", "b"),
                    ("format", "json"),
                    ("properties.enable.auto.commit", "true"),
                ],
                "set by Weir",
            ),
            (
                vec![
                    ("topic", "t"),
                    ("properties.bootstrap.server", "b"),
                    ("format", "json"),
                    ("bad_records", "maybe"),
                ],
                "'skip'",
            ),
            (vec![("topik", "t")], "\"topik\""),
        ] {
            let error = KafkaOptions::parse(&options(&pairs)).unwrap_err();
            assert!(error.contains(expected), "{pairs:?}: {error}");
        }
    }
}
