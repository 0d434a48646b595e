// The API's viewer at /api/v1/docs: Swagger UI (vendored in vendor/) reading the document this
// server generates. Everything loads from this server: no validator badge, no external URL.
window.ui = SwaggerUIBundle({
  url: "/api/v1/openapi.json",
  dom_id: "#docs",
  deepLinking: true,
  validatorUrl: null,
  tryItOutEnabled: false,
  // A token entered with "Authorize" survives a reload of the page.
  persistAuthorization: true,
});
