"""A labelled retrieval set for search by meaning: each fact with a paraphrase query (the
way an agent asks, sharing few words with the fact) and an exact-word query (words the
fact itself uses). Written for this project's tests; facts are about a made-up service."""

from __future__ import annotations

# (fact, paraphrase query, exact-word query)
ITEMS: list[tuple[str, str, str]] = [
    ("The API timeout is 30 s", "how long do calls wait before giving up", "API timeout"),
    (
        "The production database runs PostgreSQL 16 in Frankfurt",
        "which SQL server version hosts our data in Germany",
        "PostgreSQL Frankfurt",
    ),
    (
        "Deploys happen every Tuesday after the standup",
        "what weekday do we ship releases",
        "deploys Tuesday",
    ),
    (
        "The billing service retries failed card charges three times",
        "how often do we attempt a declined payment again",
        "billing retries charges",
    ),
    (
        "Log files are rotated daily and kept for 14 days",
        "how long are logs preserved before deletion",
        "log files rotated",
    ),
    (
        "The staging cluster has four worker nodes",
        "how many machines are in the pre-production environment",
        "staging worker nodes",
    ),
    (
        "Alice owns the authentication module",
        "who is responsible for login code",
        "Alice authentication module",
    ),
    (
        "The cache uses Redis with a one hour expiry",
        "how long do memoized entries live in the in-memory store",
        "Redis expiry",
    ),
    (
        "Passwords are hashed with argon2id",
        "which algorithm protects user secrets at rest",
        "argon2id passwords",
    ),
    (
        "The mobile app supports Android 10 and newer",
        "minimum phone operating system for our application",
        "Android 10 mobile",
    ),
    (
        "Backups are taken every night at 02:00 UTC",
        "when do snapshots of our data happen",
        "backups night",
    ),
    (
        "The frontend is written in TypeScript with React",
        "which language and framework power the web interface",
        "TypeScript React frontend",
    ),
    (
        "Rate limiting allows 100 requests per minute per client",
        "how many calls can a customer make each minute",
        "rate limiting requests",
    ),
    (
        "The office wifi password changes every month",
        "how frequently is the wireless network key rotated",
        "wifi password month",
    ),
    (
        "Customer support is open from 9 to 17 on weekdays",
        "what hours can users reach the help desk",
        "customer support weekdays",
    ),
    (
        "The search index is rebuilt every Sunday",
        "when is the lookup catalogue regenerated",
        "search index rebuilt",
    ),
    (
        "Feature flags are stored in LaunchDarkly",
        "where do we toggle experimental functionality",
        "feature flags LaunchDarkly",
    ),
    ("The maximum upload size is 25 MB", "how large can an attached file be", "upload size"),
    (
        "Emails are sent through Amazon SES",
        "which provider delivers our outgoing mail",
        "emails Amazon SES",
    ),
    (
        "The CI pipeline runs on GitHub Actions",
        "where do automated builds and checks execute",
        "CI pipeline GitHub Actions",
    ),
    (
        "Invoices are generated on the first day of each month",
        "when do customers get their bills",
        "invoices generated",
    ),
    (
        "The default language of the site is English",
        "what tongue does the website show initially",
        "default language English",
    ),
    (
        "Kubernetes pods restart automatically after a crash",
        "what happens to containers that die unexpectedly",
        "Kubernetes pods restart",
    ),
    (
        "Session tokens expire after 24 hours",
        "how long does a login stay valid",
        "session tokens expire",
    ),
    (
        "The data warehouse is Snowflake",
        "where do analysts query historical figures",
        "data warehouse Snowflake",
    ),
    (
        "Bob is the on-call engineer this week",
        "who answers pages at the moment",
        "Bob on-call engineer",
    ),
    (
        "The payment gateway is Stripe",
        "which company processes credit card transactions for us",
        "payment gateway Stripe",
    ),
    (
        "Test coverage must stay above 80 percent",
        "what share of code needs automated checks",
        "test coverage percent",
    ),
    (
        "The load balancer terminates TLS",
        "where is HTTPS encryption unwrapped",
        "load balancer TLS",
    ),
    ("Error reports go to Sentry", "where do crash traces end up", "error reports Sentry"),
    (
        "The marketing site is hosted on Netlify",
        "which platform serves the promotional web pages",
        "marketing site Netlify",
    ),
    (
        "New hires get a laptop on their first day",
        "when do recruits receive a computer",
        "new hires laptop",
    ),
    (
        "The recommendation model is retrained weekly",
        "how often is the suggestion engine refreshed with new data",
        "recommendation model retrained",
    ),
    (
        "Database migrations run before each deploy",
        "when are schema changes applied",
        "database migrations deploy",
    ),
    (
        "The message queue is RabbitMQ",
        "which broker carries asynchronous jobs between services",
        "message queue RabbitMQ",
    ),
    (
        "Vacation requests need two weeks notice",
        "how far ahead must time off be asked for",
        "vacation requests notice",
    ),
    (
        "The API gateway listens on port 8443",
        "which network socket number does the entry proxy use",
        "API gateway port 8443",
    ),
    (
        "Dark mode was released in version 3.2",
        "which release introduced the night theme",
        "dark mode version",
    ),
    ("The team uses Slack for chat", "which messaging tool do colleagues talk in", "Slack chat"),
    (
        "Metrics are scraped by Prometheus every 15 seconds",
        "how often are monitoring numbers collected",
        "metrics Prometheus scraped",
    ),
    (
        "Images are resized to 1024 pixels wide",
        "what width do pictures get scaled to",
        "images resized pixels",
    ),
    (
        "The company headquarters is in Lisbon",
        "in which city is the main office located",
        "headquarters Lisbon",
    ),
    (
        "Secrets are kept in HashiCorp Vault",
        "where are credentials and keys stored securely",
        "secrets Vault",
    ),
    (
        "The nightly report is emailed to the finance team",
        "who receives the daily summary each morning",
        "nightly report finance",
    ),
    (
        "Free trial accounts last 14 days",
        "how long can people test the product without paying",
        "free trial accounts",
    ),
    (
        "The search service is built on Elasticsearch",
        "which engine powers full-text lookups",
        "search service Elasticsearch",
    ),
    (
        "Two approvals are required to merge a pull request",
        "how many reviewers must sign off on code changes",
        "approvals merge pull request",
    ),
    (
        "The analytics dashboard refreshes every five minutes",
        "how current are the charts in the reporting screen",
        "analytics dashboard refreshes",
    ),
    (
        "Users can export their data as CSV",
        "in what format can customers download their records",
        "export data CSV",
    ),
    (
        "The legacy monolith is written in PHP",
        "which language was the old single application built with",
        "legacy monolith PHP",
    ),
    (
        "The main branch is protected against force pushes",
        "can anyone rewrite history on the primary line of code",
        "main branch protected",
    ),
    (
        "Docker images are stored in Amazon ECR",
        "which registry keeps our container builds",
        "Docker images ECR",
    ),
    (
        "The video encoder outputs H.264 at 30 frames per second",
        "what codec and frame rate do clips use",
        "video encoder frames",
    ),
    (
        "Notifications are delivered with Firebase Cloud Messaging",
        "how do push alerts reach phones",
        "notifications Firebase",
    ),
    (
        "The quarterly planning meeting takes a full day",
        "how long is the strategy session every three months",
        "quarterly planning meeting",
    ),
    (
        "The mobile app crashes when the camera permission is denied",
        "what makes the phone application fail when photo access is refused",
        "camera permission crashes",
    ),
    (
        "Carol leads the data engineering team",
        "who manages the people building pipelines",
        "Carol data engineering",
    ),
    ("The DNS provider is Cloudflare", "who resolves our domain names", "DNS Cloudflare"),
    (
        "Password reset links are valid for one hour",
        "how long can the forgotten-credential email be used",
        "password reset links",
    ),
    (
        "The queue worker processes 500 jobs per second",
        "what throughput does the background consumer reach",
        "queue worker jobs",
    ),
    (
        "The design system lives in Storybook",
        "where can developers browse the shared UI components",
        "design system Storybook",
    ),
    (
        "Production access requires a hardware security key",
        "what do engineers need to log into live servers",
        "production access hardware key",
    ),
    (
        "The help center articles are written in Markdown",
        "what markup format do support documents use",
        "help center Markdown",
    ),
    (
        "Our SLA promises 99.9 percent uptime",
        "what availability do we guarantee to customers",
        "SLA uptime",
    ),
    (
        "Translations are managed in Crowdin",
        "where do localisation strings get handled",
        "translations Crowdin",
    ),
    (
        "The checkout page loads in under two seconds",
        "how fast is the purchase screen",
        "checkout page loads",
    ),
    (
        "Dave approves all security exceptions",
        "who signs off when a safety rule is bypassed",
        "Dave security exceptions",
    ),
    (
        "The GraphQL schema is versioned in the api-schema repository",
        "where is the query language contract kept",
        "GraphQL schema repository",
    ),
    (
        "Cron jobs run in the UTC timezone",
        "which clock do scheduled tasks follow",
        "cron jobs UTC timezone",
    ),
    (
        "The ML features are stored in Feast",
        "which feature store holds model inputs",
        "ML features Feast",
    ),
    (
        "The support chat widget is Intercom",
        "which tool lets visitors talk to our agents on the site",
        "support chat Intercom",
    ),
    (
        "Disk usage alerts fire at 85 percent",
        "when do we get warned about storage filling up",
        "disk usage alerts",
    ),
    (
        "Our app store rating is 4.6 stars",
        "how do reviewers score the phone application",
        "app store rating stars",
    ),
    (
        "The sales team uses Salesforce",
        "which CRM do account executives work in",
        "sales Salesforce",
    ),
    (
        "Code reviews should be answered within one business day",
        "how quickly must a reviewer respond to a change",
        "code reviews business day",
    ),
    (
        "The warehouse robots are charged overnight",
        "when do the automated carts refill their batteries",
        "warehouse robots charged",
    ),
    (
        "The public API is documented with OpenAPI",
        "what specification describes our external endpoints",
        "public API OpenAPI",
    ),
    (
        "Incident postmortems are blameless",
        "do we point fingers after an outage",
        "incident postmortems blameless",
    ),
    (
        "The desktop client is built with Electron",
        "which framework wraps the computer application",
        "desktop client Electron",
    ),
    (
        "Customer churn was 3 percent last quarter",
        "what share of clients left in the previous three months",
        "customer churn quarter",
    ),
    (
        "The staging database is reset every Friday",
        "when is the test data wiped",
        "staging database reset",
    ),
    (
        "Erin maintains the mobile build scripts",
        "who looks after the phone packaging tooling",
        "Erin mobile build scripts",
    ),
    (
        "The websocket server handles ten thousand connections",
        "how many live links can the realtime service hold",
        "websocket connections",
    ),
    (
        "The font used across the brand is Inter",
        "which typeface do we use in our visual identity",
        "font Inter brand",
    ),
    (
        "Refunds are processed within five business days",
        "how long until a customer gets money back",
        "refunds processed",
    ),
    (
        "The Terraform state is kept in an S3 bucket",
        "where does infrastructure-as-code store what it built",
        "Terraform state S3",
    ),
    (
        "GDPR deletion requests are handled within 30 days",
        "how soon must we erase personal data when asked",
        "GDPR deletion requests",
    ),
    (
        "The audio transcription uses Whisper",
        "which model converts speech into text",
        "audio transcription Whisper",
    ),
    (
        "Performance reviews happen twice a year",
        "how often are employees formally evaluated",
        "performance reviews",
    ),
    (
        "The CDN caches static assets for seven days",
        "how long are images and scripts kept at the edge",
        "CDN static assets",
    ),
    (
        "The map tiles come from OpenStreetMap",
        "where does the geographic imagery originate",
        "map tiles OpenStreetMap",
    ),
    (
        "Frank is the product manager for onboarding",
        "who decides what the signup flow should do",
        "Frank product manager onboarding",
    ),
    (
        "The iOS app is written in Swift",
        "which language is used for the Apple phone application",
        "iOS Swift",
    ),
    (
        "The batch ETL job starts at midnight",
        "when does the nightly extract-transform-load begin",
        "batch ETL midnight",
    ),
    (
        "API keys are scoped to a single project",
        "can one credential access several workspaces",
        "API keys scoped project",
    ),
    (
        "The fraud model blocks transactions above a risk score of 0.9",
        "when does the scam detector reject a purchase",
        "fraud model risk score",
    ),
    (
        "The newsletter goes out every Thursday",
        "which day is the mailing list bulletin sent",
        "newsletter Thursday",
    ),
    (
        "The office closes for two weeks in August",
        "when is the summer shutdown",
        "office closes August",
    ),
    (
        "Grace runs the weekly architecture review",
        "who chairs the design discussion each week",
        "Grace architecture review",
    ),
    (
        "The server fleet runs Ubuntu 22.04",
        "which Linux distribution is on our machines",
        "Ubuntu 22.04 fleet",
    ),
    (
        "Webhook deliveries are retried for up to 72 hours",
        "how long do we keep trying to notify an endpoint that fails",
        "webhook deliveries retried",
    ),
    (
        "The inventory count is synced from the ERP every hour",
        "how often do stock levels update from the planning system",
        "inventory synced ERP",
    ),
    (
        "The chatbot escalates to a human after three failed answers",
        "when does the automated assistant hand over to a person",
        "chatbot escalates human",
    ),
    (
        "Heidi is the accessibility champion",
        "who advocates for users with disabilities",
        "Heidi accessibility",
    ),
    (
        "The VPN is required for the internal wiki",
        "what must be connected to read company documentation pages",
        "VPN internal wiki",
    ),
    (
        "Contracts are signed with DocuSign",
        "which tool collects electronic signatures",
        "contracts DocuSign",
    ),
    (
        "The maximum password age is 90 days",
        "how often must people change their login secret",
        "maximum password age",
    ),
    (
        "The coffee machine is descaled every Monday",
        "when is the espresso maker cleaned of limescale",
        "coffee machine descaled",
    ),
]

# Knowledge updates: (old fact, refuted by a sensor; new fact, current; query).
UPDATES: list[tuple[str, str, str]] = [
    ("The API timeout is 30 s", "The API timeout is 45 s", "API timeout"),
    (
        "The production database runs PostgreSQL 15",
        "The production database runs PostgreSQL 16",
        "production database PostgreSQL",
    ),
    (
        "Deploys happen every Tuesday",
        "Deploys happen every Wednesday",
        "which day do deploys happen",
    ),
    ("The on-call engineer is Bob", "The on-call engineer is Carol", "who is on call"),
    ("The maximum upload size is 25 MB", "The maximum upload size is 50 MB", "maximum upload size"),
    (
        "Session tokens expire after 24 hours",
        "Session tokens expire after 12 hours",
        "session token expiry",
    ),
    ("The cache expiry is one hour", "The cache expiry is ten minutes", "cache expiry"),
    ("Backups run at 02:00 UTC", "Backups run at 03:30 UTC", "when do backups run"),
    ("The payment gateway is Stripe", "The payment gateway is Adyen", "payment gateway"),
    (
        "The server fleet runs Ubuntu 20.04",
        "The server fleet runs Ubuntu 22.04",
        "which Ubuntu do servers run",
    ),
    (
        "Rate limiting allows 100 requests per minute",
        "Rate limiting allows 300 requests per minute",
        "rate limit per minute",
    ),
    (
        "The newsletter goes out every Thursday",
        "The newsletter goes out every Monday",
        "newsletter day",
    ),
]
