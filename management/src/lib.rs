//! The management role of a druse node.
