package inbound

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
)

// Images of a message: a URL the server fetches, or base64 data with its
// media type. They go to Letta as the message's image content parts, after
// the text part (WIRE.md "Message content"). An image the server cannot
// fetch is a permanent 400: the turn fails at once, its error event names
// the URL, and the message is never sent again.

// Image is one image of a message: URL, or Data (base64, standard
// encoding) with MediaType.
type Image struct {
	URL       string `json:"url,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
}

// imageMediaTypes are the media types a base64 image may have.
var imageMediaTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// checkImages validates images; the error names the field ("images[1].url").
func checkImages(images []Image) error {
	if len(images) > MaxImages {
		return Invalid("images", "has %d images, more than the limit of %d", len(images), MaxImages)
	}
	total := 0
	for i, im := range images {
		f := fmt.Sprintf("images[%d]", i)
		switch {
		case im.URL != "" && (im.Data != "" || im.MediaType != ""):
			return Invalid(f, "has a url and data: give one")
		case im.URL != "":
			if len(im.URL) > MaxImageURLBytes {
				return Invalid(f+".url", "is %d bytes, more than the limit of %d", len(im.URL), MaxImageURLBytes)
			}
			u, err := url.Parse(im.URL)
			if err != nil || !utf8.ValidString(im.URL) || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return Invalid(f+".url", "%q is not an http(s) URL", im.URL)
			}
		case im.Data == "":
			return Invalid(f, "has neither url nor data")
		default:
			if !imageMediaTypes[im.MediaType] {
				return Invalid(f+".media_type", "%q is not one of image/png, image/jpeg, image/gif, image/webp", im.MediaType)
			}
			if n := base64.StdEncoding.DecodedLen(base64Len(im.Data)); n > MaxImageBytes+2 {
				return Invalid(f+".data", "is about %d bytes, more than the limit of %d", n, MaxImageBytes)
			}
			raw, err := base64.StdEncoding.DecodeString(im.Data)
			if err != nil {
				return Invalid(f+".data", "is not base64: %v", err)
			}
			if len(raw) > MaxImageBytes {
				return Invalid(f+".data", "is %d bytes, more than the limit of %d", len(raw), MaxImageBytes)
			}
			total += len(raw)
		}
	}
	if total > MaxImagesBytes {
		return Invalid("images", "hold %d bytes of data, more than the limit of %d", total, MaxImagesBytes)
	}
	return nil
}

// base64Len is the length of base64 data without the line breaks that the
// decoder skips (payloadcheck.Base64Len).
func base64Len(data string) int { return payloadcheck.Base64Len(data) }

// LettaImages returns the images as agentclient sends them: base64 data without line breaks.
func LettaImages(images []Image) []agentclient.Image {
	var out []agentclient.Image
	for _, im := range images {
		data := im.Data
		if strings.ContainsAny(data, "\r\n") {
			data = strings.NewReplacer("\r", "", "\n", "").Replace(data)
		}
		out = append(out, agentclient.Image{URL: im.URL, MediaType: im.MediaType, Data: data})
	}
	return out
}

// ImageURLs lists the message's image URLs, for an error that names them.
func ImageURLs(images []Image) string {
	var urls []string
	for _, im := range images {
		if im.URL != "" {
			urls = append(urls, im.URL)
		}
	}
	return strings.Join(urls, ", ")
}
