package session

// item is one conversation item as the session tracks it for retrieve/delete/truncate.
type item struct {
	ID, Role, Type, Status string
	Text                   string
	Audio                  bool
	AudioMs                float64
	ResponseID             string
	Transcript             string
}

func (it *item) wire() map[string]any {
	var content []any
	switch {
	case it.Role == "assistant" && it.Audio:
		content = []any{map[string]any{"type": "audio", "transcript": it.Text}}
	case it.Role == "assistant":
		content = []any{map[string]any{"type": "text", "text": it.Text}}
	case it.Audio:
		content = []any{map[string]any{"type": "input_audio", "transcript": nullable(it.Transcript)}}
	default:
		content = []any{map[string]any{"type": "input_text", "text": it.Text}}
	}
	return map[string]any{"id": it.ID, "object": "realtime.item", "type": it.Type, "role": it.Role,
		"status": it.Status, "content": content}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (s *DuplexSession) findItem(id string) *item {
	for _, it := range s.items {
		if it.ID == id {
			return it
		}
	}
	return nil
}

func (s *DuplexSession) lastItemID() any {
	if len(s.items) == 0 {
		return nil
	}
	return s.items[len(s.items)-1].ID
}

// sendItemAdded emits the GA and the beta spelling, as the reference does.
func (s *DuplexSession) sendItemAdded(it *item, epoch int, model bool) {
	prev := any(nil)
	if n := len(s.items); n >= 2 {
		prev = s.items[n-2].ID
	}
	for _, t := range []string{"conversation.item.added", "conversation.item.created"} {
		s.send(Event{Type: t, Epoch: epoch, Model: model, Fields: map[string]any{"previous_item_id": prev, "item": it.wire()}})
	}
}

func (s *DuplexSession) removeItem(id string) bool {
	for i, it := range s.items {
		if it.ID == id {
			s.items = append(s.items[:i], s.items[i+1:]...)
			return true
		}
	}
	return false
}
