//! The Ethernet data path: send queues ([`tx`]) put frames on the port, receive queues
//! ([`rx`]) take the frames steering hands to a TIR.

pub mod rx;
