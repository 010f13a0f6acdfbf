package local

// DefaultBackend is the backend a runtime uses unless told otherwise: on
// Windows, WSL 2, which is not built yet (`tupper doctor` says so); until
// then tupper there is a client of a daemon elsewhere.
const DefaultBackend = "wsl"
