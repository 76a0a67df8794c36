//! What the site and the user give the plugin: the `conf` table of
//! `plugin.load` in an initrc (the plugstack arguments' keys and values),
//! and the shell option `-o desi-gpu-map=VALUE`, both as JSON from the
//! shell, into the words the core reads.

use crate::error::PluginError;
use desi_gpu_map_core::settings::config::Config;
use desi_gpu_map_core::settings::option::{parse_option, OptionRequest};
use desi_gpu_map_core::settings::site::parse_args;
use serde_json::Value;

/// The site's settings from the `conf` table (`None`: none given), read
/// as strictly as the plugstack arguments: `key = "value"` (or a number)
/// is `key=value`, `key = true` the word alone, `key = false` nothing for
/// `verbose` and `key=false` (refused) for the others.
pub fn site_config(conf: Option<&str>) -> Result<Config, PluginError> {
    let Some(text) = conf else {
        return parse_args::<&str>(&[]).map_err(PluginError::Defaults);
    };
    let value: Value = serde_json::from_str(text).map_err(PluginError::ConfJson)?;
    let members = match value {
        Value::Object(members) => members,
        // Lua's empty table.
        Value::Array(items) if items.is_empty() => serde_json::Map::new(),
        _ => {
            return Err(PluginError::ConfNoTable {
                text: text.to_string(),
            })
        }
    };
    let mut words = Vec::new();
    for (key, value) in members {
        match value {
            Value::String(s) => words.push(format!("{key}={s}")),
            Value::Number(n) => words.push(format!("{key}={n}")),
            Value::Bool(true) => words.push(key),
            Value::Bool(false) if key == "verbose" => {}
            Value::Bool(false) => words.push(format!("{key}=false")),
            Value::Null | Value::Array(_) | Value::Object(_) => {
                return Err(PluginError::ConfNoValue {
                    key,
                    text: text.to_string(),
                })
            }
        }
    }
    parse_args(&words).map_err(PluginError::Conf)
}

/// The user's `-o desi-gpu-map=VALUE` (`None`: not given), as the shell
/// hands it (JSON): the same words as `--desi-gpu-map`.
pub fn request(option: Option<&str>) -> Option<Result<OptionRequest, PluginError>> {
    let text = option?;
    let value = string_or_text(text);
    Some(parse_option(&value).map_err(PluginError::Option))
}

/// A shell option's value (JSON): a string as written, anything else as
/// its text (`-o desi-gpu-map` alone is 1 to Flux).
pub fn string_or_text(text: &str) -> String {
    match serde_json::from_str(text) {
        Ok(Value::String(value)) => value,
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use desi_gpu_map_core::settings::option::Choice;

    #[test]
    fn the_conf_table_is_read_as_the_plugstack_arguments() {
        let config = site_config(Some(
            r#"{"default":"roundrobin","verbose":true,"nvml_timeout":5,"mps_dir":"/var/tmp"}"#,
        ))
        .unwrap();
        assert_eq!(
            config.default,
            Choice::Map(desi_gpu_map_core::method::Method::RoundRobin)
        );
        assert!(config.verbose);
        assert_eq!(config.nvml_timeout.as_secs(), 5);
        assert!(!site_config(Some(r#"{"verbose":false}"#)).unwrap().verbose);
        assert_eq!(site_config(Some("[]")).unwrap(), Config::default());
        assert_eq!(site_config(None).unwrap(), Config::default());
    }

    #[test]
    fn a_bad_conf_names_the_key_and_the_valid_ones() {
        let e = site_config(Some(r#"{"defualt":"contiguous"}"#))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bad entry defualt = \"contiguous\"")
                && e.contains("valid keys")
                && e.contains("mps_dir")
                && !e.contains("plugstack"),
            "{e}"
        );
        let e = site_config(Some(r#"{"default":"closests"}"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("closests") && e.contains("roundrobin"), "{e}");
        let e = site_config(Some(r#"{"mps":false}"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("mps = \"false\""), "{e}");
        let e = site_config(Some(r#"{"default":["contiguous"]}"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"default\"") && e.contains("valid keys"), "{e}");
        assert!(site_config(Some("{")).is_err());
    }

    #[test]
    fn the_option_takes_the_words_of_desi_gpu_map() {
        assert!(request(None).is_none());
        assert!(matches!(
            request(Some(r#""closest,mps,verbose""#)),
            Some(Ok(OptionRequest::Use {
                mps: true,
                verbose: true,
                ..
            }))
        ));
        assert!(matches!(
            request(Some(r#""help""#)),
            Some(Ok(OptionRequest::Help))
        ));
        let e = request(Some(r#""contigous""#))
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("invalid -o desi-gpu-map value \"contigous\"; ")
                && e.contains("roundrobin"),
            "{e}"
        );
        assert!(!e.contains("--desi-gpu-map"), "{e}");
        let e = request(Some("1")).unwrap().unwrap_err().to_string();
        assert!(e.contains("\"1\"") && e.contains("contiguous"), "{e}");
    }
}
