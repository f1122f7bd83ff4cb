package queue

import "github.com/lettaq/lettaq/queue/internal/inbound"

// Images of a message: a URL the server fetches, or base64 data with its
// media type. They go to Letta as the message's image content parts, after
// the text part (WIRE.md "Message content"). An image the server cannot
// fetch is a permanent 400: the turn fails at once, its error event names
// the URL, and the message is never sent again.

// Image is one image of a message: URL, or Data (base64, standard
// encoding) with MediaType.
type Image = inbound.Image
