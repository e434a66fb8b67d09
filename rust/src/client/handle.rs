//! One handle type per role over both kinds of client: the embedded driver ([`Client`]) and a
//! standalone driver attached through its directory ([`AttachedClient`]). The bindings hold
//! these, so a Python `Client`, `Publication` or `Subscription` is the same class either way;
//! the operations the standalone driver does not carry yet are named in their errors.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::attached::{AttachedClient, AttachedPublication, AttachedSubscription};
use super::{Client, MessageBatch, Publication, Subscription};
use crate::channel::{ChannelUri, Media};
use crate::error::Error;
use crate::protocol::OfferError;

type Result<T> = std::result::Result<T, Error>;

/// The channel scheme the standalone driver carries today.
pub const ATTACHED_CHANNEL_PREFIX: &str = "aeron:ipc";

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain handles: a panic elsewhere leaves them usable.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Checks a channel before it goes to the standalone driver: a URI that does not parse is a
/// configuration error naming the channel. `aeron:ipc` and `aeron:udp` are both carried (the
/// driver refuses, with a precise error, what it does not support within them).
fn check_attached_channel(channel: &str) -> Result<()> {
    let uri = ChannelUri::parse(channel).map_err(|e| Error::Config(format!("channel {channel:?}: {e}")))?;
    match uri.media {
        Media::Ipc | Media::Udp => Ok(()),
    }
}

/// What an operation only the embedded driver offers says on an attached client.
pub fn embedded_only(what: &str) -> Error {
    Error::Setting(format!(
        "{what} is available only with the embedded driver (Client() without dir), not yet through a standalone driver"
    ))
}

/// What the consumer-group and subjects runtimes need of a client, whichever driver it uses:
/// they hold an `Arc<dyn ClientApi>` and handles of either kind.
pub trait ClientApi: Send + Sync {
    /// Adds a publication.
    fn add_publication_handle(&self, channel: &str, stream_id: i32) -> Result<PublicationHandle>;
    /// Adds a subscription.
    fn add_subscription_handle(&self, channel: &str, stream_id: i32) -> Result<SubscriptionHandle>;
    /// Whether the client was closed.
    fn client_closed(&self) -> bool;
}

fn no_interrupt() -> std::result::Result<(), std::convert::Infallible> {
    Ok(())
}

impl ClientApi for ClientHandle {
    fn add_publication_handle(&self, channel: &str, stream_id: i32) -> Result<PublicationHandle> {
        match self.add_publication_with(channel, stream_id, no_interrupt) {
            Ok(result) => result,
            Err(never) => match never {},
        }
    }

    fn add_subscription_handle(&self, channel: &str, stream_id: i32) -> Result<SubscriptionHandle> {
        match self.add_subscription_with(channel, stream_id, no_interrupt) {
            Ok(result) => result,
            Err(never) => match never {},
        }
    }

    fn client_closed(&self) -> bool {
        self.is_closed()
    }
}

impl ClientApi for Client {
    fn add_publication_handle(&self, channel: &str, stream_id: i32) -> Result<PublicationHandle> {
        self.add_publication(channel, stream_id).map(PublicationHandle::Embedded)
    }

    fn add_subscription_handle(&self, channel: &str, stream_id: i32) -> Result<SubscriptionHandle> {
        self.add_subscription(channel, stream_id).map(SubscriptionHandle::Embedded)
    }

    fn client_closed(&self) -> bool {
        self.is_closed()
    }
}

impl<T: ClientApi + ?Sized> ClientApi for Arc<T> {
    fn add_publication_handle(&self, channel: &str, stream_id: i32) -> Result<PublicationHandle> {
        (**self).add_publication_handle(channel, stream_id)
    }

    fn add_subscription_handle(&self, channel: &str, stream_id: i32) -> Result<SubscriptionHandle> {
        (**self).add_subscription_handle(channel, stream_id)
    }

    fn client_closed(&self) -> bool {
        (**self).client_closed()
    }
}

/// A client of either driver.
pub enum ClientHandle {
    /// The embedded driver, in this process.
    Embedded(Arc<Client>),
    /// A standalone driver in another process.
    Attached(AttachedClient),
}

impl From<AttachedClient> for ClientHandle {
    fn from(client: AttachedClient) -> Self {
        ClientHandle::Attached(client)
    }
}

impl ClientHandle {
    /// Attaches to the standalone driver in `dir`.
    pub fn attach(dir: &Path, driver_timeout: Duration) -> Result<Self> {
        AttachedClient::connect(dir, driver_timeout).map(ClientHandle::Attached)
    }

    /// The embedded client, or the error naming `what` needs it.
    pub fn embedded(&self, what: &str) -> Result<&Arc<Client>> {
        match self {
            ClientHandle::Embedded(client) => Ok(client),
            ClientHandle::Attached(_) => Err(embedded_only(what)),
        }
    }

    /// Adds a publication; `interrupt` is polled while the embedded driver answers.
    pub fn add_publication_with<E>(
        &self,
        channel: &str,
        stream_id: i32,
        interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<PublicationHandle>, E> {
        match self {
            ClientHandle::Embedded(client) => {
                Ok(client.add_publication_with(channel, stream_id, interrupt)?.map(PublicationHandle::Embedded))
            }
            ClientHandle::Attached(client) => {
                if let Err(error) = check_attached_channel(channel) {
                    return Ok(Err(error));
                }
                Ok(client.add_publication_with(channel, stream_id, interrupt)?.map(|publication| {
                    PublicationHandle::Attached {
                        publication: Mutex::new(Some(Box::new(publication))),
                        channel: channel.to_string(),
                        stream_id,
                    }
                }))
            }
        }
    }

    /// Adds a subscription; `interrupt` is polled while the embedded driver answers.
    pub fn add_subscription_with<E>(
        &self,
        channel: &str,
        stream_id: i32,
        interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<SubscriptionHandle>, E> {
        match self {
            ClientHandle::Embedded(client) => {
                Ok(client.add_subscription_with(channel, stream_id, interrupt)?.map(SubscriptionHandle::Embedded))
            }
            ClientHandle::Attached(client) => {
                if let Err(error) = check_attached_channel(channel) {
                    return Ok(Err(error));
                }
                Ok(client.add_subscription_with(channel, stream_id, interrupt)?.map(|subscription| {
                    SubscriptionHandle::Attached {
                        subscription: Mutex::new(Some(subscription)),
                        channel: channel.to_string(),
                        stream_id,
                    }
                }))
            }
        }
    }

    /// The client of a driver reached through shared memory (`None`: the old embedded driver).
    pub fn attached(&self) -> Option<&AttachedClient> {
        match self {
            ClientHandle::Embedded(_) => None,
            ClientHandle::Attached(client) => Some(client),
        }
    }

    /// Whether the client was closed.
    pub fn is_closed(&self) -> bool {
        match self {
            ClientHandle::Embedded(client) => client.is_closed(),
            ClientHandle::Attached(client) => client.is_closed(),
        }
    }

    /// Closes the client (embedded: stops the driver; attached: tells the driver, whose
    /// publications linger until their subscribers have the data).
    pub fn close(&self) {
        match self {
            ClientHandle::Embedded(client) => client.close(),
            ClientHandle::Attached(client) => client.close(),
        }
    }
}

/// A publication of either driver.
pub enum PublicationHandle {
    /// In the embedded driver.
    Embedded(Publication),
    /// In a standalone driver's shared log; `None` once closed.
    Attached {
        /// The mapped publication (boxed: it is much larger than the embedded handle).
        publication: Mutex<Option<Box<AttachedPublication>>>,
        /// Channel URI as given.
        channel: String,
        /// Stream id.
        stream_id: i32,
    },
}

fn closed_publication() -> Error {
    Error::Closed("publication")
}

impl PublicationHandle {
    /// The embedded publication, or the error naming `what` needs it.
    pub fn embedded(&self, what: &str) -> Result<&Publication> {
        match self {
            PublicationHandle::Embedded(publication) => Ok(publication),
            PublicationHandle::Attached { .. } => Err(embedded_only(what)),
        }
    }

    fn with_attached<R>(
        publication: &Mutex<Option<Box<AttachedPublication>>>,
        f: impl FnOnce(&AttachedPublication) -> Result<R>,
    ) -> Result<R> {
        lock(publication).as_deref().ok_or_else(closed_publication).and_then(f)
    }

    /// Appends one message: `Ok(position)`, `Ok(Err(refusal))`, or `Err` when the client or its
    /// driver is gone (an attached client whose driver died: [`Error::Timeout`]).
    pub fn offer(&self, payload: &[u8]) -> Result<std::result::Result<i64, OfferError>> {
        match self {
            PublicationHandle::Embedded(publication) => Ok(publication.offer(payload)),
            // Closed (the publication or its client) is an outcome, `CLOSED`, as embedded.
            PublicationHandle::Attached { publication, .. } => {
                match Self::with_attached(publication, |p| p.try_offer(payload)) {
                    Err(Error::Closed(_)) => Ok(Err(OfferError::Closed)),
                    other => other,
                }
            }
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
        match self {
            PublicationHandle::Embedded(publication) => Ok(publication.offer_batch(messages)),
            PublicationHandle::Attached { publication, .. } => {
                match Self::with_attached(publication, |p| p.offer_batch(messages)) {
                    Err(Error::Closed(_)) => Ok((0, Some(OfferError::Closed))),
                    other => other,
                }
            }
        }
    }

    /// Whether a subscriber is connected (attached: a closed publication is not).
    pub fn is_connected(&self) -> Result<bool> {
        match self {
            PublicationHandle::Embedded(publication) => Ok(publication.is_connected()),
            PublicationHandle::Attached { publication, .. } => match lock(publication).as_ref() {
                Some(p) => p.is_connected(),
                None => Ok(false),
            },
        }
    }

    /// Whether the publication was closed.
    pub fn is_closed(&self) -> bool {
        match self {
            PublicationHandle::Embedded(publication) => publication.is_closed(),
            // A handle of a closed client is closed too (the client released it).
            PublicationHandle::Attached { publication, .. } => {
                lock(publication).as_ref().is_none_or(|p| p.is_client_closed())
            }
        }
    }

    /// Closes the publication; data already appended is still delivered (it lingers in the
    /// standalone driver until its subscribers have it).
    pub fn close(&self) {
        match self {
            PublicationHandle::Embedded(publication) => publication.close(),
            PublicationHandle::Attached { publication, .. } => drop(lock(publication).take()),
        }
    }

    /// Session id, or [`Error::Closed`] for a closed attached publication.
    pub fn session_id(&self) -> Result<i32> {
        match self {
            PublicationHandle::Embedded(publication) => Ok(publication.shared().state().identity().session_id),
            PublicationHandle::Attached { publication, .. } => Self::with_attached(publication, |p| Ok(p.session_id())),
        }
    }

    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        match self {
            PublicationHandle::Embedded(publication) => publication.shared().state().identity().stream_id,
            PublicationHandle::Attached { stream_id, .. } => *stream_id,
        }
    }

    /// Channel URI.
    pub fn channel(&self) -> String {
        match self {
            PublicationHandle::Embedded(publication) => publication.shared().channel.clone(),
            PublicationHandle::Attached { channel, .. } => channel.clone(),
        }
    }

    /// The largest message accepted.
    pub fn max_message_length(&self) -> Result<usize> {
        match self {
            PublicationHandle::Embedded(publication) => Ok(publication.shared().state().max_message_length()),
            PublicationHandle::Attached { publication, .. } => {
                Self::with_attached(publication, |p| Ok(p.max_message_length()))
            }
        }
    }

    /// The driver's status record of a publication reached through shared memory
    /// (`None`: the old embedded driver, whose publication the caller reads directly).
    pub fn attached_status(&self) -> Option<Result<crate::shm::status::PublicationInfo>> {
        match self {
            PublicationHandle::Embedded(_) => None,
            PublicationHandle::Attached { publication, .. } => Some(Self::with_attached(publication, |p| p.status())),
        }
    }

    /// The end of the last appended message.
    pub fn position(&self) -> Result<i64> {
        match self {
            PublicationHandle::Embedded(publication) => Ok(publication.shared().state().tail_position()),
            PublicationHandle::Attached { publication, .. } => Self::with_attached(publication, |p| p.position()),
        }
    }
}

/// A subscription of either driver.
pub enum SubscriptionHandle {
    /// In the embedded driver.
    Embedded(Subscription),
    /// Reading a standalone driver's logs; `None` once closed.
    Attached {
        /// The mapped subscription (polling moves its positions: one poller at a time).
        subscription: Mutex<Option<AttachedSubscription>>,
        /// Channel URI as given.
        channel: String,
        /// Stream id.
        stream_id: i32,
    },
}

impl SubscriptionHandle {
    /// The embedded subscription, or the error naming `what` needs it.
    pub fn embedded(&self, what: &str) -> Result<&Subscription> {
        match self {
            SubscriptionHandle::Embedded(subscription) => Ok(subscription),
            SubscriptionHandle::Attached { .. } => Err(embedded_only(what)),
        }
    }

    /// Appends whole messages within `fragment_limit` fragments to `batch`; returns fragments.
    pub fn poll_into(&self, batch: &mut MessageBatch, fragment_limit: usize) -> Result<usize> {
        match self {
            SubscriptionHandle::Embedded(subscription) => subscription.poll_into(batch, fragment_limit),
            SubscriptionHandle::Attached { subscription, .. } => match lock(subscription).as_mut() {
                Some(s) => s.poll_into(batch, fragment_limit),
                None => Err(Error::Closed("subscription")),
            },
        }
    }

    /// Whether a publication is connected; `Err` when the client or its driver is gone.
    pub fn is_connected(&self) -> Result<bool> {
        match self {
            SubscriptionHandle::Embedded(subscription) => {
                subscription.check_running().map(|()| subscription.is_connected())
            }
            SubscriptionHandle::Attached { subscription, .. } => match lock(subscription).as_mut() {
                Some(s) => s.is_connected(),
                None => Err(Error::Closed("subscription")),
            },
        }
    }

    /// The driver's records of a subscription's images when reached through shared memory
    /// (`None`: the old embedded driver, whose subscription the caller reads directly).
    pub fn attached_images(&self) -> Option<Result<Vec<crate::shm::status::ImageInfo>>> {
        match self {
            SubscriptionHandle::Embedded(_) => None,
            SubscriptionHandle::Attached { subscription, .. } => Some(match lock(subscription).as_ref() {
                Some(s) => s.images(),
                None => Err(Error::Closed("subscription")),
            }),
        }
    }

    /// Whether the subscription was closed.
    pub fn is_closed(&self) -> bool {
        match self {
            SubscriptionHandle::Embedded(subscription) => subscription.is_closed(),
            SubscriptionHandle::Attached { subscription, .. } => {
                lock(subscription).as_ref().is_none_or(|s| s.is_client_closed())
            }
        }
    }

    /// Stops receiving.
    pub fn close(&self) {
        match self {
            SubscriptionHandle::Embedded(subscription) => subscription.close(),
            SubscriptionHandle::Attached { subscription, .. } => drop(lock(subscription).take()),
        }
    }

    /// Channel URI.
    pub fn channel(&self) -> String {
        match self {
            SubscriptionHandle::Embedded(subscription) => subscription.shared().channel.clone(),
            SubscriptionHandle::Attached { channel, .. } => channel.clone(),
        }
    }

    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        match self {
            SubscriptionHandle::Embedded(subscription) => subscription.shared().stream_id,
            SubscriptionHandle::Attached { stream_id, .. } => *stream_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attached_client_takes_ipc_and_udp_and_refuses_a_bad_uri() {
        assert!(check_attached_channel("aeron:ipc").is_ok());
        assert!(check_attached_channel("aeron:ipc?term-length=64k").is_ok());
        assert!(check_attached_channel("aeron:udp?endpoint=127.0.0.1:40123").is_ok());
        let message = check_attached_channel("aeron:udp?endpoint=nowhere").unwrap_err().to_string();
        assert!(message.contains("aeron:udp?endpoint=nowhere"), "{message}");
        assert!(check_attached_channel("nonsense").is_err());
    }
}
