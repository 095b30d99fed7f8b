package api

import (
	"encoding/json"
	"net/http"
)

// apiErrorEnvelope is OpenAI's error shape: {"error":{"message","type","param","code"}}.
// The official SDKs pick their exception class from the HTTP status and read message and code.
type apiErrorEnvelope struct {
	Error apiErrorDetail `json:"error"`
}

type apiErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"` // null when empty, as OpenAI sends it
	Code    *string `json:"code"`
}

// writeAPIError answers status with an OpenAI-shaped error body. code may be empty (JSON null).
func writeAPIError(w http.ResponseWriter, status int, errType, code, msg string) {
	d := apiErrorDetail{Message: msg, Type: errType}
	if code != "" {
		d.Code = &code
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiErrorEnvelope{Error: d})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
