package follow

import (
	"sync"
	"time"
)

// seenFor is how long a target's default ServiceAccount, once seen, is
// taken to be there without reading it again. Its controller makes it
// again within moments of a deletion, and a pod created meanwhile is
// refused by the target's admission, which its chaperon tries again.
const seenFor = time.Minute

// seen remembers, per target and namespace, when something was last seen
// there. The zero value is ready.
type seen struct {
	mu  sync.Mutex
	at  map[[2]string]time.Time
	now func() time.Time
}

// Add records that it was seen now.
func (s *seen) Add(target, namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[[2]string]time.Time{}
	}
	now := s.clock()
	s.at[[2]string{target, namespace}] = now
	if len(s.at) > 4096 {
		for k, t := range s.at {
			if now.Sub(t) > seenFor {
				delete(s.at, k)
			}
		}
	}
}

// Has tells whether it was seen within seenFor.
func (s *seen) Has(target, namespace string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[[2]string{target, namespace}]
	return ok && s.clock().Sub(t) <= seenFor
}

func (s *seen) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}
