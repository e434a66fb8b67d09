//! A batch of whole messages, as a subscription's poll hands them out.

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
