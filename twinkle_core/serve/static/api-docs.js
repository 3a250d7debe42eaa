// Starts Swagger UI on /docs (a file of its own: the service's Content-Security-Policy allows no inline script).
(function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    validatorUrl: null, // no badge from validator.swagger.io: nothing leaves the server
    presets: [SwaggerUIBundle.presets.apis],
  });
})();
