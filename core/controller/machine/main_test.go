package machine_test

import (
	"testing"

	"github.com/machinist-io/machinist/harness/ctrltest"
)

func TestMain(m *testing.M) { ctrltest.Main(m) }
