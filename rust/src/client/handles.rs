//! The client, publication and subscription handles and the state they share with the driver.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::assembler::{Assembler, MessageBatch, MessageHeader};
use crate::driver::events::DriverEvent;
use crate::driver::{lock, lock_checked, Driver, DriverCommand, DriverContext, ThreadingMode};
use crate::error::{Error, Result};
use crate::protocol::{Image, ImageCounters, ImageState, NetworkPublication, OfferError};

/// A publication's state, shared by the application (appending) and the sender agent.
#[derive(Debug)]
pub struct PublicationShared {
    /// Unique id within the driver.
    pub id: u64,
    /// The channel URI as given.
    pub channel: String,
    state: Mutex<NetworkPublication>,
}

impl PublicationShared {
    /// Wraps a publication.
    pub fn new(id: u64, channel: String, publication: NetworkPublication) -> Self {
        PublicationShared { id, channel, state: Mutex::new(publication) }
    }

    /// Locks the publication state.
    pub fn state(&self) -> MutexGuard<'_, NetworkPublication> {
        lock(&self.state)
    }
}

/// An image as a subscription sees it.
#[derive(Clone, Debug)]
pub struct ImageHandle {
    /// Publication session of the image.
    pub session_id: i32,
    /// Stream of the image.
    pub stream_id: i32,
    /// Address the data comes from.
    pub source: String,
    /// The image itself, shared with the receiver agent.
    pub image: Arc<Mutex<Image>>,
}

/// A snapshot of one image for counters and `sub.images()`.
#[derive(Clone, Debug)]
pub struct ImageStatus {
    /// Publication session.
    pub session_id: i32,
    /// Source address.
    pub source: String,
    /// This subscription's position.
    pub position: i64,
    /// Everything before this has arrived.
    pub rebuild_position: i64,
    /// Highest position seen.
    pub hwm_position: i64,
    /// Whether the image is still receiving.
    pub active: bool,
    /// The image's counters.
    pub counters: ImageCounters,
}

/// A subscription's state, shared by the application (polling) and the receiver agent.
#[derive(Debug)]
pub struct SubscriptionShared {
    /// Unique id within the driver (also the consumer id in images).
    pub id: u64,
    /// The channel URI as given.
    pub channel: String,
    /// The stream.
    pub stream_id: i32,
    /// Replaced as a whole on change, so a poll only clones an `Arc`.
    images: Mutex<Arc<[ImageHandle]>>,
}

impl SubscriptionShared {
    /// A subscription with no image yet.
    pub fn new(id: u64, channel: String, stream_id: i32) -> Self {
        SubscriptionShared { id, channel, stream_id, images: Mutex::new(Arc::from(Vec::new())) }
    }

    /// The receiver created an image this subscription consumes.
    pub fn add_image(&self, image: ImageHandle) {
        let mut images = lock(&self.images);
        let mut updated = images.to_vec();
        updated.push(image);
        *images = Arc::from(updated);
    }

    /// The receiver removed an image.
    pub fn remove_image(&self, image: &Arc<Mutex<Image>>) {
        let mut images = lock(&self.images);
        let updated: Vec<ImageHandle> = images.iter().filter(|h| !Arc::ptr_eq(&h.image, image)).cloned().collect();
        *images = Arc::from(updated);
    }

    fn images(&self) -> Arc<[ImageHandle]> {
        lock(&self.images).clone()
    }
}

/// A connection to a media driver; creates publications and subscriptions.
///
/// By default it starts an embedded driver on a thread of its own.
pub struct Client {
    driver: Arc<Driver>,
    closed: AtomicBool,
    publications: Mutex<Vec<Arc<PublicationShared>>>,
    subscriptions: Mutex<Vec<Arc<SubscriptionShared>>>,
}

impl Client {
    /// Starts an embedded driver with `context` and connects to it.
    pub fn new(context: DriverContext) -> Result<Client> {
        let driver = Driver::start(context)?;
        Ok(Client {
            driver: Arc::new(driver),
            closed: AtomicBool::new(false),
            publications: Mutex::new(Vec::new()),
            subscriptions: Mutex::new(Vec::new()),
        })
    }

    /// The driver's settings.
    pub fn context(&self) -> &DriverContext {
        self.driver.context()
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed("client"))
        } else {
            Ok(())
        }
    }

    /// Creates a publication on `channel` / `stream_id`.
    pub fn add_publication(&self, channel: &str, stream_id: i32) -> Result<Publication> {
        match self.add_publication_with(channel, stream_id, || Ok::<(), std::convert::Infallible>(())) {
            Ok(result) => result,
            Err(never) => match never {},
        }
    }

    /// [`Client::add_publication`], asking `interrupt` now and then whether to give up while
    /// it waits for the driver (see [`Driver::request_with`]).
    pub fn add_publication_with<E>(
        &self,
        channel: &str,
        stream_id: i32,
        interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<Publication>, E> {
        if let Err(error) = self.check_open() {
            return Ok(Err(error));
        }
        let answer = self.driver.request_with(
            |reply| DriverCommand::AddPublication { channel: channel.to_owned(), stream_id, reply },
            interrupt,
        )?;
        Ok(answer.and_then(|shared| {
            lock_checked(&self.publications, "client")?.push(shared.clone());
            Ok(Publication {
                shared,
                driver: self.driver.clone(),
                closed: AtomicBool::new(false),
                offers: Default::default(),
            })
        }))
    }

    /// Creates a subscription on `channel` / `stream_id`.
    pub fn add_subscription(&self, channel: &str, stream_id: i32) -> Result<Subscription> {
        match self.add_subscription_with(channel, stream_id, || Ok::<(), std::convert::Infallible>(())) {
            Ok(result) => result,
            Err(never) => match never {},
        }
    }

    /// [`Client::add_subscription`], asking `interrupt` now and then whether to give up while
    /// it waits for the driver (see [`Driver::request_with`]).
    pub fn add_subscription_with<E>(
        &self,
        channel: &str,
        stream_id: i32,
        interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<Subscription>, E> {
        if let Err(error) = self.check_open() {
            return Ok(Err(error));
        }
        let answer = self.driver.request_with(
            |reply| DriverCommand::AddSubscription { channel: channel.to_owned(), stream_id, reply },
            interrupt,
        )?;
        Ok(answer.and_then(|shared| {
            lock_checked(&self.subscriptions, "client")?.push(shared.clone());
            Ok(Subscription {
                shared,
                driver: self.driver.clone(),
                closed: AtomicBool::new(false),
                assembler: Mutex::new(Assembler::default()),
                next_image: Default::default(),
            })
        }))
    }

    /// Takes the driver events logged since the last call (receivers joining or leaving
    /// flow-control groups, connection changes, error frames), oldest first.
    pub fn drain_events(&self) -> Vec<DriverEvent> {
        self.driver.drain_events()
    }

    /// The embedded driver (counters).
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// Runs one driver duty cycle (invoker mode) unless another thread is running one; returns
    /// the work done. No-op otherwise.
    pub fn do_work(&self) -> usize {
        self.driver.do_work()
    }

    /// `Ok` while the driver works; the failure (or closed) otherwise.
    pub fn check_running(&self) -> Result<()> {
        self.driver.check_running()
    }

    /// Whether [`Client::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes everything this client made and stops the embedded driver.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // Closing a driver that failed (poisoned lock) still stops its thread: errors here have
        // already been reported by the call that met them, so close goes on regardless.
        if let Ok(mut publications) = self.publications.lock() {
            for publication in publications.drain(..) {
                if let Ok(mut state) = publication.state.lock() {
                    state.close();
                }
            }
        }
        if let Ok(mut subscriptions) = self.subscriptions.lock() {
            for subscription in subscriptions.drain(..) {
                // The driver is shut down next, which removes every subscription anyway.
                self.driver.send(DriverCommand::RemoveSubscription { id: subscription.id }).ok();
            }
        }
        self.driver.shutdown();
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.close();
    }
}

/// Sends messages on one channel and stream.
pub struct Publication {
    shared: Arc<PublicationShared>,
    driver: Arc<Driver>,
    closed: AtomicBool,
    offers: std::sync::atomic::AtomicU32,
}

impl Publication {
    fn check_open(&self) -> std::result::Result<(), OfferError> {
        if self.closed.load(Ordering::Acquire) || self.driver.is_shut_down() || self.driver.has_failed() {
            Err(OfferError::Closed)
        } else {
            Ok(())
        }
    }

    fn invoke_driver_if_needed(&self, force: bool) {
        if self.driver.context().threading_mode == ThreadingMode::Invoker
            && (force || self.offers.fetch_add(1, Ordering::Relaxed) % 16 == 0)
        {
            // A failure is recorded in the driver: the next offer reports the publication closed
            // and every request reports the failure.
            self.driver.do_work();
        }
    }

    /// Appends one message; returns the new stream position.
    pub fn offer(&self, payload: &[u8]) -> std::result::Result<i64, OfferError> {
        self.check_open()?;
        let result = self.shared.state().offer(payload, 0);
        self.invoke_driver_if_needed(result.is_err());
        if matches!(result, Err(OfferError::BackPressured | OfferError::NotConnected)) {
            self.driver.client_idle();
        }
        result
    }

    /// Appends messages until one is refused; returns how many were taken and the outcome of
    /// the first refusal (if any).
    pub fn offer_batch<'a, I>(&self, messages: I) -> (usize, Option<OfferError>)
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        if let Err(error) = self.check_open() {
            return (0, Some(error));
        }
        let mut taken = 0;
        let mut refusal = None;
        {
            let mut state = self.shared.state();
            for message in messages {
                match state.offer(message, 0) {
                    Ok(_) => taken += 1,
                    Err(error) => {
                        refusal = Some(error);
                        break;
                    }
                }
            }
        }
        self.invoke_driver_if_needed(true);
        if taken == 0 && matches!(refusal, Some(OfferError::BackPressured | OfferError::NotConnected)) {
            self.driver.client_idle();
        }
        (taken, refusal)
    }

    /// `Ok` while the driver works; the failure (or closed) otherwise.
    pub fn check_running(&self) -> Result<()> {
        self.driver.check_running()
    }

    /// Whether enough receivers are connected to publish.
    pub fn is_connected(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && self.shared.state().is_connected()
    }

    /// The shared state (for counters).
    pub fn shared(&self) -> &Arc<PublicationShared> {
        &self.shared
    }

    /// Closes the publication: appended data is still delivered, then end of stream.
    pub fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.shared.state().close();
        }
    }

    /// Whether [`Publication::close`] was called (or the client closed).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.shared.state().is_closed()
    }
}

impl Drop for Publication {
    fn drop(&mut self) {
        self.close();
    }
}

/// Receives messages on one channel and stream, from every publication sending there.
pub struct Subscription {
    shared: Arc<SubscriptionShared>,
    driver: Arc<Driver>,
    closed: AtomicBool,
    assembler: Mutex<Assembler>,
    next_image: std::sync::atomic::AtomicUsize,
}

impl Subscription {
    /// Moves up to `fragment_limit` fragments into `batch` as whole messages; returns the
    /// number of fragments consumed.
    pub fn poll_into(&self, batch: &mut MessageBatch, fragment_limit: usize) -> Result<usize> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("subscription"));
        }
        self.driver.check_running().map_err(|error| match error {
            Error::Closed(_) => Error::Closed("subscription"),
            other => other,
        })?;
        if self.driver.context().threading_mode == ThreadingMode::Invoker {
            self.driver.try_do_work()?;
        }
        let images = self.shared.images();
        if images.is_empty() {
            self.driver.client_idle();
            return Ok(0);
        }
        let start = self.next_image.fetch_add(1, Ordering::Relaxed) % images.len();
        let mut assembler = lock_checked(&self.assembler, "subscription assembler")?;
        let mut fragments = 0;
        for index in 0..images.len() {
            if fragments >= fragment_limit {
                break;
            }
            let handle = &images[(start + index) % images.len()];
            let mut image = lock_checked(&handle.image, "image")?;
            fragments += image.poll_fragments(self.shared.id, fragment_limit - fragments, |fragment| {
                assembler.on_fragment(&fragment, batch)
            });
            if image.state() == ImageState::Closed {
                assembler.remove_session(handle.session_id);
            }
        }
        drop(assembler);
        if fragments == 0 {
            self.driver.client_idle();
        }
        Ok(fragments)
    }

    /// Polls and calls `handler` for every whole message, outside any driver lock.
    pub fn poll<F>(&self, fragment_limit: usize, mut handler: F) -> Result<usize>
    where
        F: FnMut(&[u8], &MessageHeader),
    {
        let mut batch = MessageBatch::default();
        let fragments = self.poll_into(&mut batch, fragment_limit)?;
        for index in 0..batch.len() {
            handler(batch.message(index), &batch.headers[index]);
        }
        Ok(fragments)
    }

    /// Whether at least one publication's image is connected.
    pub fn is_connected(&self) -> bool {
        self.shared.images().iter().any(|handle| lock(&handle.image).state() == ImageState::Active)
    }

    /// Snapshots of the subscription's images.
    pub fn images(&self) -> Vec<ImageStatus> {
        self.shared
            .images()
            .iter()
            .map(|handle| {
                let image = lock(&handle.image);
                ImageStatus {
                    session_id: handle.session_id,
                    source: handle.source.clone(),
                    position: image.consumer_position(self.shared.id).unwrap_or(0),
                    rebuild_position: image.rebuild_position(),
                    hwm_position: image.hwm_position(),
                    active: image.state() == ImageState::Active,
                    counters: image.counters(),
                }
            })
            .collect()
    }

    /// `Ok` while the driver works; the failure (or closed) otherwise.
    pub fn check_running(&self) -> Result<()> {
        self.driver.check_running()
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<SubscriptionShared> {
        &self.shared
    }

    /// Stops receiving: the driver closes this subscription's images.
    pub fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            // A driver that is shut down or failed has no subscription left to remove.
            self.driver.send(DriverCommand::RemoveSubscription { id: self.shared.id }).ok();
        }
    }

    /// Whether [`Subscription::close`] was called (or the client closed).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.driver.is_shut_down()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.close();
    }
}
