// The interactive API page (/docs): Swagger UI, vendored in swagger-ui/, over the document
// the page names (its own server's /openapi.json). A script of its own, not inline, so the
// page's Content-Security-Policy allows scripts from this origin only.
(() => {
  "use strict";

  const root = document.getElementById("swagger-ui");
  window.ui = window.SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    domNode: root,
    layout: "BaseLayout",
    presets: [window.SwaggerUIBundle.presets.apis],
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    displayOperationId: true, // the name a generated client gives each call (create_request)
    // Nothing from elsewhere: no badge from the online validator, and no ?url= or
    // ?configUrl= in the address to load another document into this origin's page.
    validatorUrl: null,
    queryConfigEnabled: false,
  });
})();
