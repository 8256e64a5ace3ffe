//! A file source's options, as `CREATE SOURCE ... WITH (...)` gives them
//! (Flink SQL's filesystem connector's names, RisingWave's
//! `match_pattern`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::duration::parse_duration;
use crate::records::{BadRecords, Format};

/// How often a location is listed when `source.monitor-interval` is not
/// given.
const DEFAULT_MONITOR_INTERVAL: Duration = Duration::from_secs(10);

/// How a file's bytes hold rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFormat {
    /// Lines of records: JSON objects (JSON lines) or CSV rows.
    Records {
        /// The records' encoding.
        format: Format,
        /// Whether each file's first record is a header to leave out (CSV).
        header: bool,
    },
    /// Apache Parquet: the source's columns taken by name.
    Parquet,
}

/// S3 settings a source gives itself (RisingWave's names), over those of
/// the server's environment.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Settings {
    /// `s3.region_name`.
    pub region: Option<String>,
    /// `s3.endpoint_url`, for an S3-compatible server.
    pub endpoint: Option<String>,
    /// `s3.credentials.access`: the access key id.
    pub access_key: Option<String>,
    /// `s3.credentials.secret`: the secret access key (best named as
    /// `SECRET name`).
    pub secret_key: Option<String>,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("access_key", &self.access_key)
            .field(
                "secret_key",
                &self.secret_key.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl S3Settings {
    /// Whether any is given.
    pub fn is_empty(&self) -> bool {
        *self == S3Settings::default()
    }
}

/// A file source's validated options.
#[derive(Debug, Clone)]
pub struct FileOptions {
    /// The folder or object-store prefix read (`path`): a local folder,
    /// `file://...` or `s3://bucket/prefix`.
    pub location: String,
    /// How files encode rows.
    pub format: FileFormat,
    /// Which files under the location are read (a glob on the path below
    /// it); `None`: every file.
    pub pattern: Option<glob::Pattern>,
    /// How often the location is listed for new files.
    pub monitor_interval: Duration,
    /// What a record that does not parse does.
    pub bad_records: BadRecords,
    /// S3 settings over the environment's.
    pub s3: S3Settings,
}

impl FileOptions {
    /// Reads `options` (keys lowercased, without `connector`).
    pub fn parse(options: &BTreeMap<String, String>) -> Result<Self, String> {
        let mut location = None;
        let mut format = None;
        let mut delimiter = b',';
        let mut header = false;
        let mut pattern = None;
        let mut monitor_interval = DEFAULT_MONITOR_INTERVAL;
        let mut bad_records = BadRecords::Fail;
        let mut s3 = S3Settings::default();
        for (key, value) in options {
            match key.as_str() {
                "path" => location = Some(value.clone()),
                "format" | "encode" => format = Some(value.to_ascii_lowercase()),
                "csv.delimiter" | "csv.field-delimiter" => {
                    delimiter = match value.as_bytes() {
                        [byte] if byte.is_ascii() => *byte,
                        _ => return Err(format!("{key} = '{value}' is not one ASCII character")),
                    }
                }
                "csv.header" => {
                    header = match value.to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(format!("{key} = '{value}': use 'true' or 'false'")),
                    }
                }
                "match_pattern" => {
                    pattern = Some(
                        glob::Pattern::new(value)
                            .map_err(|e| format!("match_pattern = '{value}': {e}"))?,
                    )
                }
                "source.monitor-interval" => monitor_interval = parse_duration(key, value)?,
                "bad_records" => bad_records = BadRecords::parse(value)?,
                // Read by the server; checked here with the other options.
                crate::dead_letters::RETENTION_OPTION => {
                    crate::dead_letters::retention(options)?;
                }
                "s3.region_name" => s3.region = Some(value.clone()),
                "s3.endpoint_url" => s3.endpoint = Some(value.clone()),
                "s3.credentials.access" => s3.access_key = Some(value.clone()),
                "s3.credentials.secret" => s3.secret_key = Some(value.clone()),
                _ => return Err(format!("option \"{key}\" is not recognized")),
            }
        }
        let location = location.ok_or(
            "a file source needs path = '...' (a folder, file://... or s3://bucket/prefix)",
        )?;
        let format = match format.as_deref() {
            Some("json") => FileFormat::Records {
                format: Format::Json,
                header: false,
            },
            Some("csv") => FileFormat::Records {
                format: Format::Csv { delimiter },
                header,
            },
            Some("parquet") => FileFormat::Parquet,
            Some(other) => {
                return Err(format!(
                    "format '{other}' is not supported for a file source \
                     (Weir reads 'csv', 'json' and 'parquet')"
                ))
            }
            None => return Err("a file source needs format = 'csv', 'json' or 'parquet'".into()),
        };
        if header
            && !matches!(
                format,
                FileFormat::Records {
                    format: Format::Csv { .. },
                    ..
                }
            )
        {
            return Err("csv.header is an option of format = 'csv'".into());
        }
        if !s3.is_empty() && !location.starts_with("s3://") {
            return Err("s3.* options are for a path = 's3://bucket/prefix'".into());
        }
        Ok(FileOptions {
            location,
            format,
            pattern,
            monitor_interval,
            bad_records,
            s3,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<FileOptions, String> {
        FileOptions::parse(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn reads_formats_patterns_and_intervals() {
        let csv = parse(&[
            ("path", "s3://bucket/in"),
            ("format", "csv"),
            ("csv.header", "true"),
            ("csv.field-delimiter", ";"),
            ("match_pattern", "*.csv"),
            ("source.monitor-interval", "250ms"),
        ])
        .expect("valid");
        assert_eq!(csv.location, "s3://bucket/in");
        assert_eq!(
            csv.format,
            FileFormat::Records {
                format: Format::Csv { delimiter: b';' },
                header: true
            }
        );
        assert!(csv.pattern.expect("pattern").matches("day1.csv"));
        assert_eq!(csv.monitor_interval, Duration::from_millis(250));
        let parquet = parse(&[("path", "/data"), ("format", "PARQUET")]).expect("valid");
        assert_eq!(parquet.format, FileFormat::Parquet);
        assert_eq!(parquet.monitor_interval, Duration::from_secs(10));
        assert_eq!(parquet.bad_records, BadRecords::Fail);
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        let error = |pairs: &[(&str, &str)]| parse(pairs).expect_err("refused");
        assert!(error(&[("format", "csv")]).contains("needs path"));
        assert!(error(&[("path", "/d")]).contains("needs format"));
        assert!(error(&[("path", "/d"), ("format", "avro")]).contains("not supported"));
        assert!(
            error(&[("path", "/d"), ("format", "json"), ("csv.header", "true")])
                .contains("csv.header")
        );
        assert!(
            error(&[("path", "/d"), ("format", "csv"), ("topic", "t")]).contains("not recognized")
        );
        assert!(error(&[
            ("path", "/d"),
            ("format", "csv"),
            ("source.monitor-interval", "soon")
        ])
        .contains("duration"));
        assert!(
            error(&[("path", "/d"), ("format", "csv"), ("match_pattern", "[")])
                .contains("match_pattern")
        );
        assert!(
            error(&[("path", "/d"), ("format", "csv"), ("s3.region_name", "x")]).contains("s3://")
        );
        let s3 = parse(&[
            ("path", "s3://b/p"),
            ("format", "csv"),
            ("s3.credentials.secret", "hush"),
        ])
        .expect("valid");
        assert!(
            !format!("{s3:?}").contains("hush"),
            "the secret is not shown"
        );
    }
}
