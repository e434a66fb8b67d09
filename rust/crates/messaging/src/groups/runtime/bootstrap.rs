//! The bootstrap exchange over the client API: [`fetch`] asks the listed addresses (the asking
//! side, for a member about to join); [`answer_message`] turns one received BOOTSTRAP into the
//! sealed answer and `Replies` sends it (the answering side, run by every member's background
//! thread and by the [`super::responder`] of `affinity driver` and `affinity router`: one code
//! path, so both treat a group secret alike). The decisions are the sans-IO
//! [`crate::groups::bootstrap`]'s.

use std::net::SocketAddr;
use std::time::Duration;

use super::MemberOptions;
use crate::client::{ClientApi, MessageBatch, PublicationHandle as Publication};
use crate::control::bootstrap::{
    bootstrap_namespace, BootstrapMember, BootstrapReply, BootstrapRequest, BOOTSTRAP_AUTH_STREAM,
};
use crate::control::member::{self, new_member_id, InboxAddress, CONTROL_TERM_LENGTH};
use crate::control::{GroupSecret, MemberView, StreamAuth, CONTROL_STREAM_ID};
use crate::groups::bootstrap::{answer, BootstrapClient, Learned};
use crate::groups::{GroupConfig, GroupError};
use crate::time::MonotonicClock;

pub use crate::groups::bootstrap::NO_ANSWER;

/// Replies the inbox is read for per round of [`fetch`].
const REPLY_FRAGMENTS: usize = 16;
/// How long [`fetch`] sleeps between rounds.
const FETCH_SLEEP: Duration = Duration::from_millis(2);
/// Answers a member keeps trying to send at once (more requests are dropped, counted).
pub const MAX_PENDING_REPLIES: usize = 16;
/// How long an answer is tried (the asker's inbox may take a moment to connect) before it is
/// dropped.
pub const REPLY_LINGER: Duration = Duration::from_secs(2);

/// The authentication of group `name`'s bootstrap messages (both ways).
pub fn bootstrap_auth(secret: Option<&GroupSecret>, name: &str) -> StreamAuth {
    StreamAuth::new(secret, bootstrap_namespace(name), BOOTSTRAP_AUTH_STREAM)
}

/// The CONTROL-stream channel of the inbox at `endpoint`.
pub fn control_channel(endpoint: &str) -> String {
    format!("aeron:udp?endpoint={endpoint}|term-length={CONTROL_TERM_LENGTH}")
}

/// Asks `addresses` about group `name` (holding `held`, if any) from a short-lived inbox on
/// `options.host`, until the first valid answer or `timeout`.
pub fn fetch(
    client: &dyn ClientApi,
    name: &str,
    held: Option<&GroupConfig>,
    addresses: &[SocketAddr],
    options: &MemberOptions,
    timeout: Duration,
) -> Result<Learned, GroupError> {
    if addresses.is_empty() {
        return Err(GroupError::Definition("bootstrap: the list of addresses is empty".into()));
    }
    let inbox = member::open_inbox(client, &InboxAddress::new(&options.host, None)?, &[CONTROL_STREAM_ID])?;
    let Some(subscription) = inbox.subscriptions.first() else {
        return Err(GroupError::Definition("bootstrap: the reply inbox has no CONTROL stream".into()));
    };
    let mut publications: Vec<Publication> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for address in addresses {
        match client.add_publication_handle(&control_channel(&address.to_string()), CONTROL_STREAM_ID) {
            Ok(publication) => publications.push(publication),
            Err(error) => failures.push(format!("{address}: {error}")),
        }
    }
    let clock = MonotonicClock::new();
    let sender = new_member_id();
    let mut state =
        BootstrapClient::new(name, addresses.to_vec(), held.cloned(), sender, new_member_id(), timeout, clock.now());
    let mut auth = bootstrap_auth(options.secret.as_ref(), name);
    let request = state.request(&inbox.endpoint);
    let mut bytes = Vec::new();
    let mut batch = MessageBatch::default();
    let outcome = loop {
        let now = clock.now();
        if state.take_due(now) {
            // Sealed anew each round: a receiver accepts each sequence once.
            if member::seal_into(&mut bytes, &mut auth, |out| request.emit(out)).is_ok() {
                member::offer_to_all(&bytes, publications.iter());
            }
        }
        batch.clear();
        let _ = subscription.poll_into(&mut batch, REPLY_FRAGMENTS);
        for index in 0..batch.len() {
            let Ok(body) = auth.open(batch.message(index)) else { continue };
            if let Ok(reply) = BootstrapReply::parse(body) {
                state.on_reply(reply);
            }
        }
        if let Some(outcome) = state.poll(clock.now()) {
            break outcome;
        }
        std::thread::sleep(FETCH_SLEEP);
    };
    publications.iter().for_each(Publication::close);
    inbox.subscriptions.iter().for_each(|s| s.close());
    outcome.map_err(|error| match failures.is_empty() {
        true => error,
        false => GroupError::Definition(format!("{error}; publications not created: {}", failures.join("; "))),
    })
}

/// What became of one BOOTSTRAP message ([`answer_message`]).
pub enum Answered {
    /// Not authentic under the group's bootstrap key (a secret the asker lacks, or a forgery):
    /// dropped without an answer, counted by the [`StreamAuth`] as every member counts it.
    Refused,
    /// Authentic but not a well-formed BOOTSTRAP.
    Malformed,
    /// About another group: no answer.
    OtherGroup,
    /// The answer, sealed, for the request's `reply_to`.
    Reply {
        /// The request answered.
        request: BootstrapRequest,
        /// The sealed BOOTSTRAP_REPLY.
        bytes: Vec<u8>,
    },
}

/// Answers one received BOOTSTRAP `message` for group `definition` as `own` (listed first) with
/// the members `view` holds live: verified by `auth` (the group's [`bootstrap_auth`]) before
/// anything is decoded, the answer sealed by it. Every answering side calls this.
pub fn answer_message(
    auth: &mut StreamAuth,
    message: &[u8],
    definition: &GroupConfig,
    own: BootstrapMember,
    view: &MemberView,
    now: crate::time::Instant,
) -> Answered {
    let Ok(body) = auth.open(message) else { return Answered::Refused };
    let Ok(request) = BootstrapRequest::parse(body) else { return Answered::Malformed };
    let Some(reply) = answer(&request, definition, own, view, now) else { return Answered::OtherGroup };
    let mut bytes = Vec::new();
    if member::seal_into(&mut bytes, auth, |out| reply.emit(out)).is_err() {
        return Answered::Malformed;
    }
    Answered::Reply { request, bytes }
}

/// An answer on its way to an asker.
pub(super) struct PendingReply {
    /// The asker's inbox.
    pub endpoint: String,
    /// The sealed reply.
    pub bytes: Vec<u8>,
    /// The publication, once created (outside the member's lock).
    pub publication: Option<Publication>,
    /// Whether its creation was asked for (once: a failure waits out [`REPLY_LINGER`]).
    pub asked: bool,
    /// When it was queued.
    pub queued: crate::time::Instant,
}

/// A member's answers in flight (at most [`MAX_PENDING_REPLIES`]).
#[derive(Default)]
pub(super) struct Replies {
    pending: Vec<PendingReply>,
    /// Requests dropped because [`MAX_PENDING_REPLIES`] answers were in flight.
    pub dropped: u64,
    /// Answers sent.
    pub sent: u64,
}

impl Replies {
    /// Queues `bytes` for `endpoint` (dropped and counted when too many are in flight).
    pub fn queue(&mut self, endpoint: String, bytes: Vec<u8>, now: crate::time::Instant) {
        if self.pending.len() >= MAX_PENDING_REPLIES {
            self.dropped += 1;
            return;
        }
        self.pending.push(PendingReply { endpoint, bytes, publication: None, asked: false, queued: now });
    }

    /// The endpoints whose publications are to be created (each asked for once).
    pub fn take_wanted(&mut self) -> Vec<String> {
        let mut wanted = Vec::new();
        for reply in self.pending.iter_mut().filter(|reply| !reply.asked) {
            reply.asked = true;
            wanted.push(reply.endpoint.clone());
        }
        wanted
    }

    /// Installs a created publication for `endpoint`'s answers (closed when none waits).
    pub fn install(&mut self, endpoint: &str, publication: Publication) {
        match self.pending.iter_mut().find(|reply| reply.endpoint == endpoint && reply.publication.is_none()) {
            Some(reply) => reply.publication = Some(publication),
            None => publication.close(),
        }
    }

    /// Offers every answer whose publication exists; drops those sent or older than
    /// [`REPLY_LINGER`]. Returns how many were sent.
    pub fn pump(&mut self, now: crate::time::Instant) -> usize {
        let mut sent = 0;
        self.pending.retain(|reply| {
            let delivered =
                reply.publication.as_ref().is_some_and(|publication| publication.try_offer(&reply.bytes).is_ok());
            if delivered {
                sent += 1;
            }
            let keep = !delivered && now.saturating_since(reply.queued) < REPLY_LINGER;
            if !keep {
                if let Some(publication) = &reply.publication {
                    publication.close();
                }
            }
            keep
        });
        self.sent += sent as u64;
        sent
    }

    /// Drops every answer.
    pub fn clear(&mut self) {
        for reply in self.pending.drain(..) {
            if let Some(publication) = reply.publication {
                publication.close();
            }
        }
    }
}
