package machine_test

import (
	"testing"

	"github.com/machinist-io/machinist/core/controller/internal/ctrltest"
)

func TestMain(m *testing.M) { ctrltest.Main(m) }
