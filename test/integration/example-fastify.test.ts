/** examples/fastify.ts as 2 real server processes: see test/support/web-example-suite.ts. */
import { webExampleSuite } from '../support/web-example-suite.js';

webExampleSuite('fastify');
