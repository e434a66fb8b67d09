//! Reassembly of fragmented messages into a batch of whole messages.

use std::collections::HashMap;

use crate::protocol::image::Fragment;
use crate::wire::flags;

/// Where a message came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageHeader {
    /// Publication session.
    pub session_id: i32,
    /// Stream.
    pub stream_id: i32,
    /// Stream position after the message's last fragment.
    pub position: i64,
    /// Term id of the last fragment.
    pub term_id: i32,
    /// Term offset of the last fragment.
    pub term_offset: i32,
    /// Flags of the last fragment.
    pub flags: u8,
    /// Reserved value of the last fragment.
    pub reserved_value: i64,
}

/// Whole messages, stored back to back: message `i` is `data[offsets[i]..offsets[i + 1]]`.
#[derive(Debug)]
pub struct MessageBatch {
    /// Message bytes.
    pub data: Vec<u8>,
    /// `len() + 1` offsets into `data`, starting with 0.
    pub offsets: Vec<usize>,
    /// One header per message.
    pub headers: Vec<MessageHeader>,
}

impl Default for MessageBatch {
    fn default() -> Self {
        MessageBatch { data: Vec::new(), offsets: vec![0], headers: Vec::new() }
    }
}

impl MessageBatch {
    /// Messages in the batch.
    pub fn len(&self) -> usize {
        self.headers.len()
    }

    /// Whether the batch holds no message.
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    /// Message `index`.
    pub fn message(&self, index: usize) -> &[u8] {
        &self.data[self.offsets[index]..self.offsets[index + 1]]
    }

    /// Empties the batch, keeping its allocations.
    pub fn clear(&mut self) {
        self.data.clear();
        self.offsets.clear();
        self.offsets.push(0);
        self.headers.clear();
    }

    /// Appends one whole message with its header.
    pub(crate) fn push_message(&mut self, message: &[u8], header: MessageHeader) {
        self.data.extend_from_slice(message);
        self.push_header(header);
    }

    fn push_header(&mut self, header: MessageHeader) {
        self.offsets.push(self.data.len());
        self.headers.push(header);
    }
}

/// Per-session buffers for messages whose first fragments have arrived.
#[derive(Debug, Default)]
pub struct Assembler {
    partial: HashMap<i32, Vec<u8>>,
}

impl Assembler {
    /// Feeds one fragment; complete messages are appended to `batch`.
    pub fn on_fragment(&mut self, fragment: &Fragment<'_>, batch: &mut MessageBatch) {
        let header = fragment.header;
        let message_header = MessageHeader {
            session_id: header.session_id,
            stream_id: header.stream_id,
            position: fragment.position,
            term_id: header.term_id,
            term_offset: header.term_offset,
            flags: header.flags,
            reserved_value: header.reserved_value,
        };
        let begin = header.flags & flags::BEGIN != 0;
        let end = header.flags & flags::END != 0;
        if begin && end {
            batch.data.extend_from_slice(fragment.payload);
            batch.push_header(message_header);
            return;
        }
        if begin {
            let buffer = self.partial.entry(header.session_id).or_default();
            buffer.clear();
            buffer.extend_from_slice(fragment.payload);
            return;
        }
        let Some(buffer) = self.partial.get_mut(&header.session_id) else { return };
        if buffer.is_empty() {
            return; // joined mid-message: drop fragments until the next BEGIN
        }
        buffer.extend_from_slice(fragment.payload);
        if end {
            batch.data.extend_from_slice(buffer);
            buffer.clear();
            batch.push_header(message_header);
        }
    }

    /// Forgets a session (its image went away).
    pub fn remove_session(&mut self, session_id: i32) {
        self.partial.remove(&session_id);
    }
}
