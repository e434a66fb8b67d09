//! The handles the bindings and the messaging runtimes hold: a [`ClientHandle`] over an
//! [`AttachedClient`] (of a standalone driver, or of the media driver run in process by
//! `embedded`), and [`PublicationHandle`] / [`SubscriptionHandle`] that can be closed while
//! shared (a Python object, a group member and a subject peer may each hold one).

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use super::attached::{uninterrupted, AttachedClient, AttachedPublication, AttachedSubscription};
use super::MessageBatch;
use crate::channel::ChannelUri;
use crate::error::Error;
use crate::protocol::OfferError;
use crate::shm::log_buffer::Unsent;
use crate::shm::status::{ImageInfo, PublicationInfo};
use crate::sync::lock;

type Result<T> = std::result::Result<T, Error>;

/// Checks a channel before it goes to the driver: a URI that does not parse, or an `aeron:udp`
/// one asking for what the driver does not do ([`ChannelUri::unsupported_udp`]), is a
/// configuration error naming the channel. Also what the Spark data source runs on its options
/// at plan time.
pub fn check_channel(channel: &str) -> Result<()> {
    let refused = |what: String| Error::Config(format!("channel {channel:?}: {what}"));
    let uri = ChannelUri::parse(channel).map_err(|e| refused(e.to_string()))?;
    uri.unsupported_udp().map_or(Ok(()), |what| Err(refused(what)))
}

/// What the consumer-group and subjects runtimes need of a client: they hold an
/// `Arc<dyn ClientApi>`.
pub trait ClientApi: Send + Sync {
    /// Adds a publication.
    fn add_publication_handle(&self, channel: &str, stream_id: i32) -> Result<PublicationHandle>;
    /// Adds a subscription.
    fn add_subscription_handle(&self, channel: &str, stream_id: i32) -> Result<SubscriptionHandle>;
    /// Whether the client was closed.
    fn client_closed(&self) -> bool;
    /// Waits at most `timeout` for received data (`AttachedClient::wait_for_data`); what an
    /// idle polling thread calls instead of sleeping. By default it sleeps `timeout`.
    fn wait_for_data(&self, timeout: std::time::Duration) {
        std::thread::sleep(timeout);
    }
}

impl ClientApi for ClientHandle {
    fn add_publication_handle(&self, channel: &str, stream_id: i32) -> Result<PublicationHandle> {
        uninterrupted(|interrupt| self.add_publication_with(channel, stream_id, interrupt))
    }

    fn add_subscription_handle(&self, channel: &str, stream_id: i32) -> Result<SubscriptionHandle> {
        uninterrupted(|interrupt| self.add_subscription_with(channel, stream_id, interrupt))
    }

    fn client_closed(&self) -> bool {
        self.is_closed()
    }

    fn wait_for_data(&self, timeout: std::time::Duration) {
        self.client().wait_for_data(timeout);
    }
}

impl<T: ClientApi + ?Sized> ClientApi for std::sync::Arc<T> {
    fn add_publication_handle(&self, channel: &str, stream_id: i32) -> Result<PublicationHandle> {
        (**self).add_publication_handle(channel, stream_id)
    }

    fn add_subscription_handle(&self, channel: &str, stream_id: i32) -> Result<SubscriptionHandle> {
        (**self).add_subscription_handle(channel, stream_id)
    }

    fn client_closed(&self) -> bool {
        (**self).client_closed()
    }

    fn wait_for_data(&self, timeout: std::time::Duration) {
        (**self).wait_for_data(timeout);
    }
}

/// A client of a driver reached through shared memory (standalone, or embedded in process).
pub struct ClientHandle {
    client: AttachedClient,
}

impl From<AttachedClient> for ClientHandle {
    fn from(client: AttachedClient) -> Self {
        ClientHandle { client }
    }
}

impl ClientHandle {
    /// Attaches to the standalone driver in `dir`.
    pub fn attach(dir: &Path, driver_timeout: Duration) -> Result<Self> {
        AttachedClient::connect(dir, driver_timeout).map(ClientHandle::from)
    }

    /// The client.
    pub fn client(&self) -> &AttachedClient {
        &self.client
    }

    /// Adds a publication; `interrupt` is polled while the driver answers.
    pub fn add_publication_with<E>(
        &self,
        channel: &str,
        stream_id: i32,
        interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<PublicationHandle>, E> {
        if let Err(error) = check_channel(channel) {
            return Ok(Err(error));
        }
        Ok(self.client.add_publication_with(channel, stream_id, interrupt)?.map(|publication| PublicationHandle {
            publication: Mutex::new(Some(Box::new(publication))),
            channel: channel.to_string(),
            stream_id,
        }))
    }

    /// Adds a subscription; `interrupt` is polled while the driver answers.
    pub fn add_subscription_with<E>(
        &self,
        channel: &str,
        stream_id: i32,
        interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<SubscriptionHandle>, E> {
        if let Err(error) = check_channel(channel) {
            return Ok(Err(error));
        }
        Ok(self.client.add_subscription_with(channel, stream_id, interrupt)?.map(|subscription| SubscriptionHandle {
            subscription: Mutex::new(Some(subscription)),
            channel: channel.to_string(),
            stream_id,
        }))
    }

    /// Whether the client was closed.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Closes the client (tells the driver, whose publications linger until their subscribers
    /// have the data; an embedded driver stops once they have).
    pub fn close(&self) {
        self.client.close()
    }

    /// [`ClientHandle::close`], an embedded driver draining for at most `drain` (`None`: its own
    /// bound); returns what it left unsent.
    pub fn close_within(&self, drain: Option<Duration>) -> Unsent {
        self.client.close_within(drain)
    }
}

/// A publication in a driver's shared log; `None` once closed.
pub struct PublicationHandle {
    /// The mapped publication (boxed: it is large).
    publication: Mutex<Option<Box<AttachedPublication>>>,
    /// Channel URI as given.
    channel: String,
    /// Stream id.
    stream_id: i32,
}

fn closed_publication() -> Error {
    Error::Closed("publication")
}

impl PublicationHandle {
    fn with<R>(&self, f: impl FnOnce(&AttachedPublication) -> Result<R>) -> Result<R> {
        lock(&self.publication).as_deref().ok_or_else(closed_publication).and_then(f)
    }

    /// Appends one message: `Ok(position)`, `Ok(Err(refusal))`, or `Err` when the driver is
    /// gone ([`Error::Timeout`]). A closed publication or client is the outcome `CLOSED`.
    pub fn offer(&self, payload: &[u8]) -> Result<std::result::Result<i64, OfferError>> {
        match self.with(|p| p.try_offer(payload)) {
            Err(Error::Closed(_)) => Ok(Err(OfferError::Closed)),
            other => other,
        }
    }

    /// Appends one message, a closed client or dead driver being [`OfferError::Closed`] (what
    /// the runtimes need: a refusal either way).
    pub fn try_offer(&self, payload: &[u8]) -> std::result::Result<i64, OfferError> {
        self.offer(payload).unwrap_or(Err(OfferError::Closed))
    }

    /// Appends messages until one is refused: how many were taken and the refusal.
    pub fn offer_batch<'a, I>(&self, messages: I) -> Result<(usize, Option<OfferError>)>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        match self.with(|p| p.offer_batch(messages)) {
            Err(Error::Closed(_)) => Ok((0, Some(OfferError::Closed))),
            other => other,
        }
    }

    /// Whether a subscriber is connected (a closed publication is not).
    pub fn is_connected(&self) -> Result<bool> {
        match lock(&self.publication).as_ref() {
            Some(p) => p.is_connected(),
            None => Ok(false),
        }
    }

    /// Whether the publication was closed (a handle of a closed client is closed too: the
    /// client released it).
    pub fn is_closed(&self) -> bool {
        lock(&self.publication).as_ref().is_none_or(|p| p.is_client_closed())
    }

    /// Closes the publication; data already appended is still delivered (it lingers in the
    /// driver until its subscribers have it).
    pub fn close(&self) {
        drop(lock(&self.publication).take())
    }

    /// Session id, or [`Error::Closed`].
    pub fn session_id(&self) -> Result<i32> {
        self.with(|p| Ok(p.session_id()))
    }

    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        self.stream_id
    }

    /// Channel URI.
    pub fn channel(&self) -> String {
        self.channel.clone()
    }

    /// The largest message accepted.
    pub fn max_message_length(&self) -> Result<usize> {
        self.with(|p| Ok(p.max_message_length()))
    }

    /// The driver's status record of the publication.
    pub fn status(&self) -> Result<PublicationInfo> {
        self.with(|p| p.status())
    }

    /// The end of the last appended message.
    pub fn position(&self) -> Result<i64> {
        self.with(|p| p.position())
    }
}

/// A subscription reading a driver's logs; `None` once closed.
pub struct SubscriptionHandle {
    /// The mapped subscription (polling moves its positions: one poller at a time).
    subscription: Mutex<Option<AttachedSubscription>>,
    /// Channel URI as given.
    channel: String,
    /// Stream id.
    stream_id: i32,
}

fn closed_subscription() -> Error {
    Error::Closed("subscription")
}

impl SubscriptionHandle {
    /// Appends whole messages within `fragment_limit` fragments to `batch`; returns fragments.
    pub fn poll_into(&self, batch: &mut MessageBatch, fragment_limit: usize) -> Result<usize> {
        match lock(&self.subscription).as_mut() {
            Some(s) => s.poll_into(batch, fragment_limit),
            None => Err(closed_subscription()),
        }
    }

    /// Whether a publication is connected; `Err` when the client or its driver is gone.
    pub fn is_connected(&self) -> Result<bool> {
        match lock(&self.subscription).as_mut() {
            Some(s) => s.is_connected(),
            None => Err(closed_subscription()),
        }
    }

    /// The driver's records of the subscription's images.
    pub fn images(&self) -> Result<Vec<ImageInfo>> {
        match lock(&self.subscription).as_ref() {
            Some(s) => s.images(),
            None => Err(closed_subscription()),
        }
    }

    /// Whether the subscription was closed.
    pub fn is_closed(&self) -> bool {
        lock(&self.subscription).as_ref().is_none_or(|s| s.is_client_closed())
    }

    /// Stops receiving.
    pub fn close(&self) {
        drop(lock(&self.subscription).take())
    }

    /// Channel URI.
    pub fn channel(&self) -> String {
        self.channel.clone()
    }

    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        self.stream_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipc_and_udp_channels_pass_and_a_bad_uri_is_named() {
        assert!(check_channel("aeron:ipc").is_ok());
        assert!(check_channel("aeron:ipc?term-length=64k").is_ok());
        assert!(check_channel("aeron:udp?endpoint=127.0.0.1:40123").is_ok());
        let message = check_channel("aeron:udp?endpoint=nowhere").unwrap_err().to_string();
        assert!(message.contains("aeron:udp?endpoint=nowhere"), "{message}");
        assert!(check_channel("nonsense").is_err());
    }
}
