//! `aeron:ipc`: publications and subscriptions inside one driver, without sockets.
//!
//! The same sans-IO state machines as for UDP run on both sides; the agent carries their
//! datagrams in memory: DATA/SETUP/heartbeats from each IPC publication to one image per
//! matching IPC subscription, status messages and NAKs back. Flow control is `min`, so the
//! slowest subscriber paces the publisher and no subscriber misses data.

use std::sync::{Arc, Mutex};

use super::receiver::{lock, ImageDefaults};
use super::transmit::TransmitBatch;
use crate::client::{ImageHandle, PublicationShared, SubscriptionShared};
use crate::protocol::{Image, ImageState};
use crate::time::Instant;
use crate::wire::{flags, parse_control, ControlFrame, FrameHeader, FrameType, Setup, StatusMessage};

struct IpcSubscription {
    stream_id: i32,
    session_filter: Option<i32>,
    receiver_id: i64,
    shared: Arc<SubscriptionShared>,
    defaults: ImageDefaults,
}

struct IpcImage {
    subscription_id: u64,
    image: Arc<Mutex<Image>>,
}

struct IpcLink {
    publication: Arc<PublicationShared>,
    images: Vec<IpcImage>,
    last_idle: Instant,
}

/// Moves the traffic of IPC publications to IPC subscriptions.
pub struct IpcAgent {
    links: Vec<IpcLink>,
    subscriptions: Vec<IpcSubscription>,
    datagrams_per_cycle: usize,
    batch: TransmitBatch,
    buffer: Vec<u8>,
    seeds: fastrand::Rng,
}

impl IpcAgent {
    /// An agent with no IPC streams.
    pub fn new(datagrams_per_cycle: usize) -> Self {
        IpcAgent {
            links: Vec::new(),
            subscriptions: Vec::new(),
            datagrams_per_cycle,
            batch: TransmitBatch::default(),
            buffer: vec![0; 65536],
            seeds: fastrand::Rng::new(),
        }
    }

    /// Whether any IPC publication is served (for tests).
    #[cfg(test)]
    pub(crate) fn has_publications(&self) -> bool {
        !self.links.is_empty()
    }

    /// Serves an IPC publication.
    pub fn add_publication(&mut self, publication: Arc<PublicationShared>, now: Instant) {
        self.links.push(IpcLink { publication, images: Vec::new(), last_idle: now });
    }

    /// Adds an IPC subscription; publications already running are asked for a SETUP.
    pub fn add_subscription(
        &mut self,
        stream_id: i32,
        session_filter: Option<i32>,
        receiver_id: i64,
        shared: Arc<SubscriptionShared>,
        defaults: ImageDefaults,
        now: Instant,
    ) {
        for link in &self.links {
            let mut publication = link.publication.state();
            let identity = *publication.identity();
            if identity.stream_id == stream_id && session_filter.is_none_or(|id| id == identity.session_id) {
                let elicit = StatusMessage {
                    flags: flags::SM_SEND_SETUP,
                    session_id: identity.session_id,
                    stream_id,
                    consumption_term_id: 0,
                    consumption_term_offset: 0,
                    receiver_window: 0,
                    receiver_id,
                    group_tag: defaults.group_tag,
                };
                publication.on_status_message(&elicit, now);
            }
        }
        self.subscriptions.push(IpcSubscription { stream_id, session_filter, receiver_id, shared, defaults });
    }

    /// Removes an IPC subscription; its images drain and close.
    pub fn remove_subscription(&mut self, subscription_id: u64, now: Instant) {
        self.subscriptions.retain(|s| s.shared.id != subscription_id);
        for link in &mut self.links {
            for entry in link.images.iter().filter(|e| e.subscription_id == subscription_id) {
                lock(&entry.image).close(now);
            }
        }
    }

    fn on_setup(&mut self, index: usize, setup: &Setup, now: Instant) {
        let link = &mut self.links[index];
        for subscription in &self.subscriptions {
            let matches = subscription.stream_id == setup.stream_id
                && subscription.session_filter.is_none_or(|id| id == setup.session_id);
            if !matches || link.images.iter().any(|e| e.subscription_id == subscription.shared.id) {
                continue;
            }
            let seed = self.seeds.u64(..);
            let Some(config) = subscription.defaults.image_config(setup, subscription.receiver_id, seed) else {
                continue;
            };
            let mut image = Image::new(config, now);
            image.add_consumer(subscription.shared.id);
            let image = Arc::new(Mutex::new(image));
            subscription.shared.add_image(ImageHandle {
                session_id: setup.session_id,
                stream_id: setup.stream_id,
                source: "ipc".to_owned(),
                image: image.clone(),
            });
            link.images.push(IpcImage { subscription_id: subscription.shared.id, image });
        }
    }

    /// One duty cycle; returns the work done.
    pub fn do_work(&mut self, now: Instant) -> usize {
        let mut work = 0;
        for index in 0..self.links.len() {
            {
                let link = &mut self.links[index];
                let mut publication = link.publication.state();
                self.batch.fill(&mut publication, now, &mut link.last_idle, self.datagrams_per_cycle);
            }
            work += self.batch.len();
            let batch = std::mem::take(&mut self.batch);
            for datagram in batch.iter() {
                let Ok(header) = FrameHeader::parse(datagram) else { continue };
                if header.frame_type == FrameType::Setup {
                    if let Ok(setup) = Setup::parse(datagram) {
                        self.on_setup(index, &setup, now);
                    }
                    continue;
                }
                for entry in &self.links[index].images {
                    let _ = lock(&entry.image).on_data(datagram, now);
                }
            }
            self.batch = batch;
            work += self.carry_control(index, now);
        }
        self.links.retain(|link| !link.publication.state().is_done());
        work
    }

    /// Status messages and NAKs from the images back to the publication; drops closed images.
    fn carry_control(&mut self, index: usize, now: Instant) -> usize {
        let mut work = 0;
        let link = &mut self.links[index];
        let mut closed = Vec::new();
        for entry in &link.images {
            let mut image = lock(&entry.image);
            image.on_tick(now);
            while let Some(length) = image.poll_transmit(now, &mut self.buffer) {
                work += 1;
                let mut publication = link.publication.state();
                match parse_control(&self.buffer[..length]) {
                    Ok(Some(ControlFrame::StatusMessage(message))) => publication.on_status_message(&message, now),
                    Ok(Some(ControlFrame::Nak(nak))) => publication.on_nak(&nak, now),
                    _ => {}
                }
            }
            if image.state() == ImageState::Closed {
                closed.push(entry.image.clone());
            }
        }
        for image in closed {
            link.images.retain(|e| !Arc::ptr_eq(&e.image, &image));
            for subscription in &self.subscriptions {
                subscription.shared.remove_image(&image);
            }
        }
        work
    }

    /// Whether a connected IPC publication still has data it has not handed over.
    pub fn has_undelivered(&self) -> bool {
        self.links.iter().any(|link| link.publication.state().has_unsent_data())
    }
}
