package server

import (
	"net/http"
	"time"

	"github.com/lightbearco/tupper/engine"
)

// imageJSON is an image of GET /images, Tupper's own read-only route: what
// sandboxes can start from, with the size of its unpacked files.
type imageJSON struct {
	ID      string    `json:"id"`
	Names   []string  `json:"names"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
	// Shared says every team may start from the image; otherwise it is
	// the caller's team's own (a template it built).
	Shared bool `json:"shared"`
}

// handleListImages serves GET /images: the images the key's team may
// start sandboxes from, newest first.
func (s *Server) handleListImages(w http.ResponseWriter, r *http.Request) {
	imgs, err := s.engine.ListImages(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := struct {
		Images []imageJSON `json:"images"`
	}{Images: make([]imageJSON, 0, len(imgs))}
	for _, img := range imgs {
		names := img.Names
		if names == nil {
			names = []string{}
		}
		out.Images = append(out.Images, imageJSON{
			ID: img.ID, Names: names, Size: img.Size, Created: img.Created, Shared: engine.ImageTeam(img) == "",
		})
	}
	writeJSON(w, http.StatusOK, out)
}
