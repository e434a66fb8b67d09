//! [`ChannelError`]: why a channel URI was refused.

use std::fmt;

/// Why a channel URI was refused: the key and value at fault (when there is one) and a reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelError {
    /// The whole URI as given.
    pub uri: String,
    /// The parameter key at fault, if the error is about one parameter.
    pub key: Option<String>,
    /// The value given for `key`, if any.
    pub value: Option<String>,
    /// What is wrong, in words.
    pub reason: String,
}

impl ChannelError {
    pub(super) fn new(uri: &str, key: Option<&str>, value: Option<&str>, reason: impl Into<String>) -> Self {
        ChannelError {
            uri: uri.to_string(),
            key: key.map(str::to_string),
            value: value.map(str::to_string),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A URI can be 4 KiB of anything; keep the message readable.
        const SHOWN: usize = 200;
        let shown = match self.uri.char_indices().nth(SHOWN) {
            Some((cut, _)) => format!("{}...", &self.uri[..cut]),
            None => self.uri.clone(),
        };
        write!(f, "invalid channel URI {shown:?}: ")?;
        match (&self.key, &self.value) {
            (Some(key), Some(value)) => write!(f, "{key}={value}: ")?,
            (Some(key), None) => write!(f, "{key}: ")?,
            (None, Some(value)) => write!(f, "{value:?}: ")?,
            (None, None) => {}
        }
        f.write_str(&self.reason)
    }
}

impl std::error::Error for ChannelError {}

impl From<ChannelError> for crate::error::Error {
    fn from(error: ChannelError) -> Self {
        crate::error::Error::Config(error.to_string())
    }
}
